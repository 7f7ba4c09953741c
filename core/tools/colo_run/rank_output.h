#pragma once

#include <chrono>
#include <optional>
#include <string>

// The ranks' output on its way to colo-run's stdout and stderr (job.cpp reads the pipes, this
// cuts what it read into whole lines, prefixes them and writes them on).
namespace colo::launcher {

// One of a rank's output pipes, cut into whole lines so that ranks' lines never interleave
// mid-line on colo-run's stdout/stderr.
struct OutputStream {
  int fd = -1;     // read end, non-blocking; -1 once closed
  int out_fd = 1;  // where its lines go: colo-run's stdout or stderr
  int rank = 0;    // the global rank, for the "[rank R] " prefix
  std::string pending;
};

// How long after its output lost its reader colo-run waits before it stops the ranks. The line
// that found the pipe closed is often a failing rank's last words, and a LibTorch process takes
// a while to exit after printing them (well under the settle time with 8 ranks on 2 cores): a rank that fails
// meanwhile is the cause, and its exit code, not the closed pipe's 141, becomes the job's.
constexpr auto kOutputGoneSettle = std::chrono::seconds(2);

class OutputForwarder {
 public:
  using Clock = std::chrono::steady_clock;

  // A stream reading `fd` (made non-blocking) into `out_fd`, for global rank `rank`.
  static OutputStream open(int fd, int out_fd, int rank);
  // Reads what is there (one chunk) and forwards the whole lines; returns whether more may
  // follow right away. At EOF the stream is closed.
  bool read(OutputStream& stream);
  // Forwards what is left (an unterminated last line too) and closes the read end.
  void close(OutputStream& stream);

  // Once the reader of colo-run's stdout or stderr went away (EPIPE) while forwarding: whose
  // output found it gone ("rank 1's stdout"). That stream's lines are read and dropped from then
  // on, so that no rank blocks on a full pipe.
  const std::optional<std::string>& reader_gone_while_forwarding() const { return reader_gone_; }
  // Then: when colo-run stops the ranks for it (kOutputGoneSettle later).
  const std::optional<Clock::time_point>& output_gone_deadline() const { return output_gone_deadline_; }

 private:
  struct Target {
    const char* name;
    bool reader_gone = false;
  };
  void emit_lines(OutputStream& stream, bool at_eof);
  void forward(const OutputStream& stream, const std::string& lines);

  Target stdout_{"stdout"}, stderr_{"stderr"};
  std::optional<std::string> reader_gone_;
  std::optional<Clock::time_point> output_gone_deadline_;
};

}  // namespace colo::launcher
