#include "rank_output.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>

#include "output.h"

namespace colo::launcher {
namespace {

// A line longer than this is forwarded in pieces, so a rank that never prints a newline (a
// progress bar) cannot grow colo-run's memory without bound.
constexpr std::size_t kMaxLine = 64 * 1024;

}  // namespace

OutputStream OutputForwarder::open(int fd, int out_fd, int rank) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  OutputStream stream;
  stream.fd = fd;
  stream.out_fd = out_fd;
  stream.rank = rank;
  return stream;
}

bool OutputForwarder::read(OutputStream& stream) {
  char buffer[65536];
  ssize_t n = ::read(stream.fd, buffer, sizeof buffer);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return false;
  if (n <= 0) {
    close(stream);
    return false;
  }
  stream.pending.append(buffer, static_cast<std::size_t>(n));
  emit_lines(stream, false);
  return true;
}

void OutputForwarder::close(OutputStream& stream) {
  if (stream.fd < 0) return;
  emit_lines(stream, true);
  ::close(stream.fd);
  stream.fd = -1;
}

// Forwards complete lines with the rank's prefix, one write() each so that lines of different
// ranks stay whole. At EOF the unterminated tail is passed on too, ended with a newline so that
// the next rank's line does not run into it.
void OutputForwarder::emit_lines(OutputStream& stream, bool at_eof) {
  const std::string prefix = fmt::format("[rank {}] ", stream.rank);
  std::string out;
  std::size_t start = 0;
  for (;;) {
    std::size_t newline = stream.pending.find('\n', start);
    std::size_t end;
    if (newline != std::string::npos && newline - start < kMaxLine) {
      end = newline + 1;
    } else if (stream.pending.size() - start >= kMaxLine) {
      end = start + kMaxLine;
    } else {
      break;
    }
    out += prefix;
    out.append(stream.pending, start, end - start);
    if (out.back() != '\n') out += '\n';
    start = end;
  }
  if (at_eof && start < stream.pending.size()) {
    out += prefix;
    out.append(stream.pending, start, std::string::npos);
    out += '\n';
    start = stream.pending.size();
  }
  stream.pending.erase(0, start);
  forward(stream, out);
}

void OutputForwarder::forward(const OutputStream& stream, const std::string& lines) {
  if (lines.empty()) return;
  Target& target = stream.out_fd == STDOUT_FILENO ? stdout_ : stderr_;
  if (target.reader_gone) return;
  if (write_all(stream.out_fd, lines) == WriteResult::kReaderGone) {
    target.reader_gone = true;
    if (!reader_gone_) {
      output_gone_deadline_ = Clock::now() + kOutputGoneSettle;
      reader_gone_ = fmt::format("rank {}'s {}", stream.rank, target.name);
    }
  }
}

}  // namespace colo::launcher
