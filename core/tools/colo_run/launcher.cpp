#include "launcher.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <sstream>

#include "node_capacity.h"
#include "output.h"

extern char** environ;

namespace colo::launcher {
namespace {

namespace po = boost::program_options;
using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------------
// Command line

po::options_description launcher_options() {
  po::options_description desc("Options");
  // clang-format off
  desc.add_options()
      ("help,h", "print this help and exit")
      ("nproc-per-node", po::value<int>()->value_name("N"), "ranks to start on this node (default 1)")
      ("nnodes", po::value<int>()->value_name("M"), "nodes in the job (default 1)")
      ("node-rank", po::value<int>()->value_name("R"), "this node's index in [0, M) (default 0)")
      ("master-addr", po::value<std::string>()->value_name("ADDR"),
       "address of rank 0's store (default 127.0.0.1)")
      ("master-port", po::value<int>()->value_name("PORT"),
       "port of rank 0's store (default: a free port; required with --nnodes > 1)")
      ("rdzv-file", po::value<std::string>()->value_name("PATH|auto"),
       "ranks rendezvous through a c10d FileStore at PATH (must not exist; removed at the end), "
       "or at a fresh temporary path with 'auto'; one node only. Exported as COLO_RDZV_FILE")
      ("grace-period", po::value<double>()->value_name("SECONDS"),
       "when stopping the ranks, wait this long after SIGTERM before SIGKILL (default 5)")
      ("no-prefix", "pass the ranks' output through without the '[rank R] ' prefix")
      ("check", "instead of a program, start N copies of colo-run that verify their environment");
  // clang-format on
  return desc;
}

// Boost.Program_options cannot stop at the first positional argument, and the program's own
// flags must not be read as colo-run's. So the split happens here: skip options (and the value
// of each option that takes one, as the options description says) until the first other token
// or "--". Unknown options stay on colo-run's side, where Boost rejects them.
std::size_t find_program_start(const std::vector<std::string>& args,
                               const po::options_description& desc, bool* saw_terminator) {
  *saw_terminator = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& token = args[i];
    if (token == "--") {
      *saw_terminator = true;
      return i;
    }
    if (token.size() < 2 || token[0] != '-') return i;
    if (token.compare(0, 2, "--") != 0 || token.find('=') != std::string::npos) continue;
    const po::option_description* option = desc.find_nothrow(token.substr(2), false);
    if (option != nullptr && option->semantic()->max_tokens() > 0) ++i;  // its value
  }
  return args.size();
}

std::string join(const std::vector<std::string>& parts, const char* separator) {
  std::string out;
  for (const auto& part : parts) {
    if (!out.empty()) out += separator;
    out += part;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Small POSIX helpers

std::string errno_text(int err) { return std::strerror(err); }

const char* signal_name(int sig) {
  // clang-format off
  switch (sig) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGXCPU: return "SIGXCPU";
    case SIGSYS: return "SIGSYS";
    default: return "unknown signal";
  }
  // clang-format on
}

std::string temp_root() {
  const char* tmpdir = std::getenv("TMPDIR");
  return (tmpdir != nullptr && *tmpdir != '\0') ? tmpdir : "/tmp";
}

// A fresh private directory (mkdtemp), emptied and removed on destruction. It only ever holds
// files colo-run or its ranks put there, so removing its entries is safe.
class TempDir {
 public:
  explicit TempDir(const std::string& stem) {
    std::string pattern = temp_root() + "/" + stem + "-XXXXXX";
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    if (::mkdtemp(buffer.data()) == nullptr) {
      throw std::runtime_error(
          fmt::format("cannot create a temporary directory '{}': {} (set "
                      "TMPDIR to a writable directory)",
                      pattern, errno_text(errno)));
    }
    path_ = buffer.data();
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    if (DIR* dir = ::opendir(path_.c_str())) {
      while (dirent* entry = ::readdir(dir)) {
        std::string name = entry->d_name;
        if (name != "." && name != "..") ::unlink((path_ + "/" + name).c_str());
      }
      ::closedir(dir);
    }
    ::rmdir(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

bool path_exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

std::string parent_directory(const std::string& path) {
  std::size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Strict decimal parse for the check mode: digits only, fits an int.
std::optional<int> parse_non_negative(const char* text) {
  if (text == nullptr || *text == '\0') return std::nullopt;
  long long value = 0;
  for (const char* p = text; *p != '\0'; ++p) {
    if (*p < '0' || *p > '9') return std::nullopt;
    value = value * 10 + (*p - '0');
    if (value > INT_MAX) return std::nullopt;
  }
  return static_cast<int>(value);
}

// ---------------------------------------------------------------------------------------------
// The job

// The variables colo-run owns. Copies inherited from colo-run's own environment (a nested
// launch, a stale shell export) are dropped so that a rank never sees a mix of two launches.
const std::set<std::string>& managed_variables() {
  static const std::set<std::string> names = {
      "RANK",        "LOCAL_RANK",  "WORLD_SIZE",    "LOCAL_WORLD_SIZE", "GROUP_RANK",
      "MASTER_ADDR", "MASTER_PORT", "COLO_LAUNCHER", "COLO_RDZV_FILE"};
  return names;
}

// One of a rank's output pipes, cut into whole lines so that ranks' lines never interleave
// mid-line on colo-run's stdout/stderr.
struct OutputStream {
  int fd = -1;     // read end; -1 once closed
  int out_fd = 1;  // where its lines go: colo-run's stdout or stderr
  std::string pending;
};

struct Rank {
  int global_rank = 0;
  pid_t pid = -1;
  bool reaped = false;
  OutputStream out, err;
};

// Why the job stopped, kept for the first cause only: later failures are usually ranks that
// lost a peer, and reporting them would hide the real one.
struct Cause {
  std::string message;
  int exit_code = 1;
  std::string aftermath;  // what colo-run did about it, for the final report
};

// A line longer than this is forwarded in pieces, so a rank that never prints a newline (a
// progress bar) cannot grow colo-run's memory without bound.
constexpr std::size_t kMaxLine = 64 * 1024;
// After the last rank exits and its process group is killed, how long to wait for descendants
// that escaped the group (setsid daemons) to exit and close the inherited pipes before colo-run
// leaves them be.
constexpr auto kDrainTimeout = std::chrono::seconds(1);
// How long after its output lost its reader colo-run waits before it stops the ranks. The line
// that found the pipe closed is often a failing rank's last words, and a LibTorch process takes
// a while to exit after printing them (0.4 s measured with 8 ranks on 2 cores): a rank that fails
// meanwhile is the cause, and its exit code, not the closed pipe's 141, becomes the job's.
constexpr auto kOutputGoneSettle = std::chrono::seconds(2);

class Job {
 public:
  explicit Job(const LaunchConfig& config) : config_(config) {}

  int run() {
    setup_signals();
    spawn_all();
    supervise();
    restore_signals();
    // The last lines, forwarded after every rank had exited, found no reader.
    if (!cause_ && reader_gone_while_forwarding_) cause_ = output_gone_cause("");
    if (cause_) {
      print_to(STDERR_FILENO, "colo-run: {}{}\n", cause_->message, cause_->aftermath);
      return cause_->exit_code;
    }
    return 0;
  }

 private:
  // SIGCHLD and the signals colo-run forwards arrive through a signalfd, so one poll() loop
  // waits for output, exits, signals and the grace-period deadline together, with no handler
  // racing the loop and no threads (which would make fork() unsafe).
  void setup_signals() {
    // An inherited SIG_IGN for SIGCHLD would make the kernel reap the ranks behind our back.
    std::signal(SIGCHLD, SIG_DFL);
    sigset_t mask;
    sigemptyset(&mask);
    for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&mask, sig);
    // Orphaned descendants of the ranks are re-parented to colo-run instead of init, so it
    // can reap them (see reap()).
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    if (::sigprocmask(SIG_BLOCK, &mask, &saved_mask_) != 0 ||
        (signal_fd_ = ::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK)) < 0) {
      throw std::runtime_error("cannot set up signal handling: " + errno_text(errno));
    }
  }

  void restore_signals() {
    ::close(signal_fd_);
    ::sigprocmask(SIG_SETMASK, &saved_mask_, nullptr);
  }

  void spawn_all() {
    const std::vector<std::string>& command = config_.command;
    std::vector<char*> argv;
    for (const auto& arg : command) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);

    std::vector<std::string> inherited;
    for (char** entry = environ; *entry != nullptr; ++entry) {
      std::string item = *entry;
      if (managed_variables().count(item.substr(0, item.find('='))) == 0) inherited.push_back(item);
    }

    // Grown one rank at a time: a rank that was never started (the exec failed earlier) is
    // not waited for.
    ranks_.reserve(static_cast<std::size_t>(config_.nproc_per_node));
    for (int local = 0; local < config_.nproc_per_node; ++local) {
      Rank& rank = ranks_.emplace_back();
      rank.global_rank = config_.node_rank * config_.nproc_per_node + local;

      // Everything the child needs is built before fork(): between fork and exec the child
      // only makes system calls.
      std::vector<std::string> env_strings = inherited;
      for (const auto& [name, value] : make_rank_env(config_, local)) {
        env_strings.push_back(name + "=" + value);
      }
      std::vector<char*> envp;
      for (auto& item : env_strings) envp.push_back(item.data());
      envp.push_back(nullptr);

      int exec_error = 0;
      try {
        exec_error = spawn(rank, argv.data(), envp.data());
      } catch (const std::runtime_error& e) {
        // Out of processes or descriptors: the ranks already running must still be stopped
        // and reaped by the loop, not abandoned.
        ranks_.pop_back();
        cause_ = Cause{e.what(), 1, local > 0 ? "; stopped the ranks already started" : ""};
        begin_stop();
        return;
      }
      if (exec_error != 0) {
        std::string hint = exec_error == ENOENT && command[0].find('/') == std::string::npos
                               ? " (not found on PATH)"
                               : "";
        cause_ = Cause{fmt::format("cannot execute '{}' for rank {}: {}{}", command[0],
                                   rank.global_rank, errno_text(exec_error), hint),
                       127, local > 0 ? "; stopped the ranks already started" : ""};
        begin_stop();
        return;
      }
    }
  }

  // Forks and execs one rank. Returns 0 once the exec succeeded, or the exec's errno (the
  // child is reaped then). The exec status travels over a close-on-exec pipe: EOF means the
  // exec happened, a written errno means it failed, so a typo in the program name is reported
  // as such instead of as N ranks exiting with 127.
  int spawn(Rank& rank, char* const* argv, char* const* envp) {
    int exec_pipe[2] = {-1, -1};
    int out_pipe[2] = {-1, -1};
    int err_pipe[2] = {-1, -1};
    auto fail = [&](const char* what) {
      const int err = errno;
      for (int fd :
           {exec_pipe[0], exec_pipe[1], out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) {
        if (fd >= 0) ::close(fd);
      }
      throw std::runtime_error(
          fmt::format("cannot {} for rank {}: {}", what, rank.global_rank, errno_text(err)));
    };
    // Close-on-exec everywhere: otherwise rank 2 would inherit rank 0's pipe ends and rank 0's
    // output would never reach EOF while rank 2 lives.
    if (::pipe2(exec_pipe, O_CLOEXEC) != 0 ||
        (config_.prefix_output &&
         (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0))) {
      fail("create pipes");
    }
    const pid_t launcher_pid = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) fail("fork");
    if (pid == 0) {
      // A session (hence a process group) of its own: kill(-pid) then reaches everything the
      // rank started, and the terminal's Ctrl-C reaches only colo-run, which decides how to
      // stop the job. Like torchrun's start_new_session.
      ::setsid();
      // If colo-run dies (even by SIGKILL), the kernel kills the rank. The signal fires when
      // the *thread* that forked exits; colo-run forks from its only thread. Grandchildren are
      // not covered: they rely on colo-run's kill(-pgid) while it is alive.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != launcher_pid) ::_exit(1);  // colo-run died before prctl took effect
      if (config_.prefix_output) {
        ::dup2(out_pipe[1], STDOUT_FILENO);
        ::dup2(err_pipe[1], STDERR_FILENO);
      }
      // Signal masks and ignored dispositions survive exec: undo colo-run's (main() ignores
      // SIGPIPE), so that a rank writing to a closed pipe ends as it would on its own.
      ::signal(SIGPIPE, SIG_DFL);
      ::sigprocmask(SIG_SETMASK, &saved_mask_, nullptr);
      ::execvpe(argv[0], argv, envp);
      int err = errno;
      ssize_t ignored = ::write(exec_pipe[1], &err, sizeof err);
      (void)ignored;
      ::_exit(127);
    }
    rank.pid = pid;
    ::close(exec_pipe[1]);
    if (config_.prefix_output) {
      ::close(out_pipe[1]);
      ::close(err_pipe[1]);
      rank.out = open_stream(out_pipe[0], STDOUT_FILENO);
      rank.err = open_stream(err_pipe[0], STDERR_FILENO);
    }
    int err = 0;
    ssize_t n;
    do {
      n = ::read(exec_pipe[0], &err, sizeof err);
    } while (n < 0 && errno == EINTR);
    ::close(exec_pipe[0]);
    if (n != static_cast<ssize_t>(sizeof err)) return 0;
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    rank.reaped = true;
    return err;
  }

  static OutputStream open_stream(int fd, int out_fd) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    OutputStream stream;
    stream.fd = fd;
    stream.out_fd = out_fd;
    return stream;
  }

  bool all_reaped() const {
    return std::all_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.reaped; });
  }

  void supervise() {
    std::optional<Clock::time_point> drain_deadline;
    for (;;) {
      if (all_reaped()) {
        if (!drain_deadline) {
          // Whatever the ranks left behind in their process groups would now be orphans.
          signal_all(SIGKILL);
          drain_deadline = Clock::now() + kDrainTimeout;
          reap();
        }
        const bool done = !any_stream_open() && !children_left_;
        if (done || Clock::now() >= *drain_deadline) break;
      }

      std::vector<pollfd> fds{{signal_fd_, POLLIN, 0}};
      std::vector<OutputStream*> streams;
      for (Rank& rank : ranks_) {
        for (OutputStream* s : {&rank.out, &rank.err}) {
          if (s->fd >= 0) {
            fds.push_back({s->fd, POLLIN, 0});
            streams.push_back(s);
          }
        }
      }
      std::optional<Clock::time_point> wake = drain_deadline;
      if (kill_deadline_ && (!wake || *kill_deadline_ < *wake)) wake = kill_deadline_;
      if (!cause_ && output_gone_deadline_ && (!wake || *output_gone_deadline_ < *wake)) {
        wake = output_gone_deadline_;
      }
      int timeout_ms = -1;
      if (wake) {
        auto left = std::chrono::ceil<std::chrono::milliseconds>(*wake - Clock::now()).count();
        timeout_ms = static_cast<int>(std::max<long long>(0, left));
      }
      if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) {
        throw std::runtime_error("poll failed: " + errno_text(errno));
      }
      for (std::size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents != 0) read_stream(*streams[i - 1]);
      }
      if (fds[0].revents & POLLIN) handle_signals();
      stop_if_output_gone();
      if (kill_deadline_ && Clock::now() >= *kill_deadline_) {
        kill_deadline_.reset();
        signal_all(SIGKILL);
      }
    }
    for (Rank& rank : ranks_) {
      close_stream(rank.out);
      close_stream(rank.err);
    }
  }

  void handle_signals() {
    signalfd_siginfo info{};
    while (::read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      const int sig = static_cast<int>(info.ssi_signo);
      if (sig == SIGCHLD) {
        reap();  // signals coalesce: reap() checks every rank
      } else if (!cause_) {
        cause_ =
            Cause{fmt::format("received {}", signal_name(sig)), 128 + sig, "; stopped the ranks"};
        print_to(STDERR_FILENO,
                 "colo-run: received {}; stopping the ranks (SIGTERM, then SIGKILL "
                 "after {} s; send it again to kill them now)\n",
                 signal_name(sig), config_.grace_period_s);
        begin_stop();
      } else {
        // A second interrupt while stopping: the user does not want to wait for the grace.
        print_to(STDERR_FILENO, "colo-run: received {} again; killing the ranks\n",
                 signal_name(sig));
        kill_deadline_.reset();
        signal_all(SIGKILL);
      }
    }
  }

  // colo-run is a child subreaper, so besides the ranks it reaps their orphaned descendants
  // (no zombies even under a container init that never reaps). waitpid(-1) serves both.
  void reap() {
    for (;;) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid < 0 && errno == EINTR) continue;
      if (pid < 0) children_left_ = false;  // ECHILD: the whole tree is gone
      if (pid <= 0) return;
      auto rank = std::find_if(ranks_.begin(), ranks_.end(),
                               [pid](const Rank& r) { return r.pid == pid && !r.reaped; });
      if (rank != ranks_.end()) on_rank_exit(*rank, status);
    }
  }

  void on_rank_exit(Rank& rank, int status) {
    rank.reaped = true;
    if (cause_) return;  // ranks exiting after the first cause are its aftermath
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
    // The rank's last words (often the reason it failed) go out before colo-run's report.
    // Bounded: a surviving grandchild may keep writing.
    for (OutputStream* stream : {&rank.out, &rank.err}) {
      for (int chunk = 0; chunk < 64 && stream->fd >= 0 && read_stream(*stream); ++chunk) {
      }
    }
    std::string what;
    int code;
    if (WIFEXITED(status)) {
      code = WEXITSTATUS(status);
      what = fmt::format("exited with code {}", code);
    } else {
      const int sig = WTERMSIG(status);
      code = 128 + sig;
      what = fmt::format("was killed by signal {} ({})", sig, signal_name(sig));
    }
    cause_ = Cause{fmt::format("rank {} (pid {}) {}", rank.global_rank, rank.pid, what), code,
                   config_.nproc_per_node > 1 ? "; stopped the other ranks" : ""};
    if (config_.nproc_per_node > 1) {
      print_to(STDERR_FILENO, "colo-run: {}; stopping the other ranks\n", cause_->message);
    }
    begin_stop();
  }

  // SIGTERM first so ranks can flush logs and checkpoints; SIGKILL after the grace period.
  void begin_stop() {
    if (config_.grace_period_s <= 0) {
      signal_all(SIGKILL);
      return;
    }
    signal_all(SIGTERM);
    kill_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(config_.grace_period_s));
  }

  // Signals every rank's process group, including groups whose leader has exited (its
  // children may live on). The kernel does not reuse a pid while a group of that id exists.
  // kill(pid) as well: a rank forked a moment ago may not have called setsid() yet.
  void signal_all(int sig) {
    for (const Rank& rank : ranks_) {
      if (rank.pid <= 0) continue;
      ::kill(-rank.pid, sig);
      if (!rank.reaped) ::kill(rank.pid, sig);
    }
  }

  bool any_stream_open() const {
    return std::any_of(ranks_.begin(), ranks_.end(),
                       [](const Rank& r) { return r.out.fd >= 0 || r.err.fd >= 0; });
  }

  const Rank& owner(const OutputStream& stream) const {
    for (const Rank& rank : ranks_) {
      if (&rank.out == &stream || &rank.err == &stream) return rank;
    }
    throw std::logic_error("output stream without a rank");
  }

  // Reads what is there (one chunk); returns whether more may follow right away.
  bool read_stream(OutputStream& stream) {
    char buffer[65536];
    ssize_t n = ::read(stream.fd, buffer, sizeof buffer);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return false;
    if (n <= 0) {
      close_stream(stream);
      return false;
    }
    stream.pending.append(buffer, static_cast<std::size_t>(n));
    emit_lines(stream, false);
    return true;
  }

  // Forwards complete lines with the rank's prefix, one write() each so that lines of
  // different ranks stay whole. At EOF the unterminated tail is passed on too, ended with a
  // newline so that the next rank's line does not run into it.
  void emit_lines(OutputStream& stream, bool at_eof) {
    const std::string prefix = fmt::format("[rank {}] ", owner(stream).global_rank);
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

  // Passes a rank's lines on. Once the reader of colo-run's stdout or stderr is gone (EPIPE),
  // that stream's lines are read and dropped, so that no rank blocks on a full pipe, and the job
  // is stopped (see stop_if_output_gone()).
  void forward(const OutputStream& stream, const std::string& lines) {
    if (lines.empty()) return;
    OutputTarget& target = stream.out_fd == STDOUT_FILENO ? stdout_ : stderr_;
    if (target.reader_gone) return;
    if (write_all(stream.out_fd, lines) == WriteResult::kReaderGone) {
      target.reader_gone = true;
      if (!reader_gone_while_forwarding_) {
        output_gone_deadline_ = Clock::now() + kOutputGoneSettle;
        reader_gone_while_forwarding_ =
            fmt::format("rank {}'s {}", owner(stream).global_rank, target.name);
      }
    }
  }

  // A rank writing into a closed pipe itself (as with --no-prefix) is killed by SIGPIPE, and
  // colo-run then stops the others. With prefixing colo-run writes for the ranks, so it does the
  // same when its own stdout or stderr lost its reader: the job ends as it would without colo-run
  // in between (`colo-run ... | head -1` returns), with 128 + SIGPIPE. A rank that failed first,
  // or within kOutputGoneSettle after, remains the cause: its exit code is the job's.
  void stop_if_output_gone() {
    if (cause_ || !output_gone_deadline_ || Clock::now() < *output_gone_deadline_) return;
    cause_ = output_gone_cause(
        "; stopped the ranks, as a closed pipe stops a program that writes to it");
    print_to(STDERR_FILENO, "colo-run: {}; stopping the ranks\n", cause_->message);
    begin_stop();
  }

  Cause output_gone_cause(const char* aftermath) const {
    return Cause{
        fmt::format("the reader of colo-run's output went away (EPIPE) while it was forwarding {}",
                    *reader_gone_while_forwarding_),
        128 + SIGPIPE, aftermath};
  }

  void close_stream(OutputStream& stream) {
    if (stream.fd < 0) return;
    emit_lines(stream, true);
    ::close(stream.fd);
    stream.fd = -1;
  }

  struct OutputTarget {
    const char* name;
    bool reader_gone = false;
  };

  const LaunchConfig& config_;
  std::vector<Rank> ranks_;
  OutputTarget stdout_{"stdout"}, stderr_{"stderr"};
  std::optional<std::string> reader_gone_while_forwarding_;  // whose output found it gone
  std::optional<Clock::time_point> output_gone_deadline_;     // then: kOutputGoneSettle later
  int signal_fd_ = -1;
  bool children_left_ = true;
  sigset_t saved_mask_{};
  std::optional<Clock::time_point> kill_deadline_;
  std::optional<Cause> cause_;
};

// Resolves the port and the rendezvous file, runs the job, removes the rendezvous file.
int run_job(LaunchConfig config) {
  if (config.master_port == 0) config.master_port = pick_free_port(config.master_addr);

  std::optional<TempDir> rdzv_dir;
  if (config.rdzv_file == "auto") {
    // A fresh directory makes the path unique and guarantees the file does not exist yet.
    rdzv_dir.emplace("colo-rdzv");
    config.rdzv_file = rdzv_dir->path() + "/store";
  } else if (!config.rdzv_file.empty()) {
    if (path_exists(config.rdzv_file)) {
      throw UsageError(fmt::format(
          "--rdzv-file '{}' already exists: a FileStore would read an earlier job's keys from "
          "it. Remove it, or use --rdzv-file auto",
          config.rdzv_file));
    }
    struct stat st {};
    const std::string dir = parent_directory(config.rdzv_file);
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      throw UsageError(
          fmt::format("--rdzv-file '{}': directory '{}' does not exist", config.rdzv_file, dir));
    }
  }

  // Said before the ranks start, so that it comes first and not amid their output.
  if (auto warning = oversubscription_warning(config.nproc_per_node, node_capacity())) {
    print_to(STDERR_FILENO, "{}\n", *warning);
  }
  int code = Job(config).run();
  // The last FileStore user normally deletes the file; after a failure nobody did.
  if (!config.rdzv_file.empty() && !rdzv_dir) ::unlink(config.rdzv_file.c_str());
  return code;
}

// ---------------------------------------------------------------------------------------------
// Self-check

int run_self_check(LaunchConfig config) {
  char exe[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0)
    throw std::runtime_error("cannot find colo-run's own executable: " + errno_text(errno));
  exe[n] = '\0';

  TempDir check_dir("colo-run-check");
  config.command = {exe, kCheckRankFlag, check_dir.path()};
  // Exercise the rendezvous-file path as well, where it applies.
  if (config.rdzv_file.empty() && config.nnodes == 1) config.rdzv_file = "auto";
  if (config.master_port == 0) config.master_port = pick_free_port(config.master_addr);

  const int code = run_job(config);
  if (code != 0) {
    print_to(STDERR_FILENO, "colo-run --check: FAILED (see the messages above)\n");
    return code;
  }
  // Each rank created rank-<RANK> exclusively: exactly this node's ranks must be there, which
  // shows that no two ranks got the same RANK and none got a rank of another node.
  std::vector<std::string> missing;
  for (int local = 0; local < config.nproc_per_node; ++local) {
    const int rank = config.node_rank * config.nproc_per_node + local;
    if (!path_exists(check_dir.path() + "/rank-" + std::to_string(rank))) {
      missing.push_back(std::to_string(rank));
    }
  }
  if (!missing.empty()) {
    print_to(STDERR_FILENO, "colo-run --check: FAILED: ranks {} did not report\n",
             join(missing, ", "));
    return 1;
  }
  const int first = config.node_rank * config.nproc_per_node;
  print_to(STDOUT_FILENO,
           "colo-run --check: OK: node {} of {} started ranks {}..{} of {} (master {}:{}{}); each "
           "verified RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, "
           "MASTER_PORT and COLO_LAUNCHER, that it leads its own process group and that "
           "PR_SET_PDEATHSIG is SIGKILL; no two ranks got the same RANK\n",
           config.node_rank, config.nnodes, first, first + config.nproc_per_node - 1,
           config.nnodes * config.nproc_per_node, config.master_addr, config.master_port,
           config.rdzv_file.empty() ? "" : ", rendezvous file checked");
  return 0;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Public API

LaunchConfig parse_args(const std::vector<std::string>& args) {
  const po::options_description desc = launcher_options();
  bool saw_terminator = false;
  const std::size_t program_start = find_program_start(args, desc, &saw_terminator);
  const std::vector<std::string> own(args.begin(), args.begin() + program_start);

  po::variables_map vm;
  try {
    // No abbreviations: "--nproc" must not silently mean "--nproc-per-node".
    const int style =
        po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
    po::store(po::command_line_parser(own).options(desc).style(style).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(e.what());
  }

  LaunchConfig config;
  config.command.assign(args.begin() + program_start + (saw_terminator ? 1 : 0), args.end());
  if (vm.count("help")) {
    config.show_help = true;
    return config;
  }
  if (vm.count("nproc-per-node")) config.nproc_per_node = vm["nproc-per-node"].as<int>();
  if (vm.count("nnodes")) config.nnodes = vm["nnodes"].as<int>();
  if (vm.count("node-rank")) config.node_rank = vm["node-rank"].as<int>();
  if (vm.count("master-addr")) config.master_addr = vm["master-addr"].as<std::string>();
  if (vm.count("rdzv-file")) config.rdzv_file = vm["rdzv-file"].as<std::string>();
  if (vm.count("grace-period")) config.grace_period_s = vm["grace-period"].as<double>();
  config.prefix_output = vm.count("no-prefix") == 0;
  config.self_check = vm.count("check") != 0;

  // Every violated rule at once, so a long command line is fixed in one go.
  std::vector<std::string> problems;
  if (config.nproc_per_node < 1) {
    problems.push_back(
        fmt::format("--nproc-per-node must be at least 1 (got {})", config.nproc_per_node));
  }
  if (config.nnodes < 1) {
    problems.push_back(fmt::format("--nnodes must be at least 1 (got {})", config.nnodes));
  } else if (config.node_rank < 0 || config.node_rank >= config.nnodes) {
    problems.push_back(fmt::format("--node-rank {} is out of range for --nnodes {}: use 0..{}",
                                   config.node_rank, config.nnodes, config.nnodes - 1));
  }
  if (config.nproc_per_node >= 1 && config.nnodes >= 1 &&
      static_cast<long long>(config.nproc_per_node) * config.nnodes > INT_MAX) {
    problems.push_back("--nnodes times --nproc-per-node does not fit an int");
  }
  if (config.master_addr.empty()) problems.push_back("--master-addr must not be empty");
  if (vm.count("master-port")) {
    const int port = vm["master-port"].as<int>();
    if (port < 1 || port > 65535) {
      problems.push_back(fmt::format("--master-port must be in 1..65535 (got {})", port));
    } else {
      config.master_port = port;
    }
  } else if (config.nnodes > 1) {
    problems.push_back(
        "--nnodes > 1 needs --master-port: every node must use the same port, "
        "so colo-run cannot pick a free one");
  }
  if (vm.count("rdzv-file")) {
    if (config.rdzv_file.empty()) {
      problems.push_back("--rdzv-file needs a path or 'auto'");
    } else if (config.nnodes > 1) {
      problems.push_back(
          "--rdzv-file works on one node only (the ranks share a local file); "
          "with --nnodes > 1 drop it and use --master-addr/--master-port");
    }
  }
  if (!std::isfinite(config.grace_period_s) || config.grace_period_s < 0) {
    problems.push_back(fmt::format("--grace-period must be a number of seconds >= 0 (got {})",
                                   config.grace_period_s));
  }
  if (config.self_check && !config.command.empty()) {
    problems.push_back(
        fmt::format("--check runs colo-run's self-check and takes no program "
                    "(got '{}')",
                    config.command[0]));
  }
  if (!config.self_check && config.command.empty()) {
    problems.push_back("no program given: colo-run [options] PROGRAM [ARGS...]");
  }
  if (!problems.empty()) throw UsageError(join(problems, "; "));
  return config;
}

std::string usage() {
  std::ostringstream text;
  text << "Usage: colo-run [options] PROGRAM [ARGS...]\n"
          "       colo-run [options] --check\n\n"
          "Starts --nproc-per-node copies of PROGRAM with the variables torchrun sets (RANK,\n"
          "LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT) and\n"
          "COLO_LAUNCHER=colo-run, prefixes each output line with '[rank R] ', and when a rank\n"
          "fails stops the others (SIGTERM, then SIGKILL after the grace period) and exits with\n"
          "that rank's code (128 + signal if it was killed). SIGINT/SIGTERM/SIGHUP sent to\n"
          "colo-run are forwarded the same way (exit 128 + signal). When nothing reads its output\n"
          "any more (colo-run ... | head -1), it stops the ranks as a closed pipe would (exit "
          "141).\n"
          "Warns when the ranks outnumber the cores (or the GPUs) available. Options end at "
          "PROGRAM.\n\n"
       << launcher_options();
  return text.str();
}

EnvVars make_rank_env(const LaunchConfig& config, int local_rank) {
  if (config.master_port < 1 || config.master_port > 65535) {
    throw std::invalid_argument(fmt::format(
        "make_rank_env: master_port {} is not a port; resolve it (pick_free_port) first",
        config.master_port));
  }
  if (config.rdzv_file == "auto") {
    throw std::invalid_argument("make_rank_env: rdzv_file 'auto' must be resolved to a path first");
  }
  if (local_rank < 0 || local_rank >= config.nproc_per_node) {
    throw std::invalid_argument(fmt::format("make_rank_env: local rank {} outside 0..{}",
                                            local_rank, config.nproc_per_node - 1));
  }
  EnvVars env = {
      {"RANK", std::to_string(config.node_rank * config.nproc_per_node + local_rank)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"WORLD_SIZE", std::to_string(config.nnodes * config.nproc_per_node)},
      {"LOCAL_WORLD_SIZE", std::to_string(config.nproc_per_node)},
      {"GROUP_RANK", std::to_string(config.node_rank)},
      {"MASTER_ADDR", config.master_addr},
      {"MASTER_PORT", std::to_string(config.master_port)},
      {"COLO_LAUNCHER", "colo-run"},
  };
  if (!config.rdzv_file.empty()) env.emplace_back("COLO_RDZV_FILE", config.rdzv_file);
  return env;
}

int pick_free_port(const std::string& addr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(addr.c_str(), "0", &hints, &found); rc != 0) {
    throw std::runtime_error(
        fmt::format("cannot resolve --master-addr '{}': {}", addr, ::gai_strerror(rc)));
  }
  std::string last_error = "no usable address";
  int port = 0;
  for (addrinfo* ai = found; ai != nullptr && port == 0; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last_error = errno_text(errno);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t length = sizeof bound;
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) == 0) {
      port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                         : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    } else {
      last_error = errno_text(errno);
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (port == 0) {
    throw std::runtime_error(
        fmt::format("cannot find a free port on --master-addr '{}': {}. Is "
                    "the address one of this machine's? Or pass "
                    "--master-port",
                    addr, last_error));
  }
  return port;
}

int run(LaunchConfig config) {
  return config.self_check ? run_self_check(std::move(config)) : run_job(std::move(config));
}

int check_rank_main(const std::string& check_dir) {
  if (check_dir.empty()) {
    print_to(STDERR_FILENO, "{} is colo-run's internal self-check mode; run colo-run --check\n",
             kCheckRankFlag);
    return 2;
  }
  std::vector<std::string> problems;
  auto number = [&](const char* name) -> std::optional<int> {
    const char* value = std::getenv(name);
    std::optional<int> parsed = parse_non_negative(value);
    if (!parsed) {
      problems.push_back(fmt::format("{}='{}' is not a non-negative integer", name,
                                     value != nullptr ? value : "(unset)"));
    }
    return parsed;
  };
  const auto rank = number("RANK");
  const auto local_rank = number("LOCAL_RANK");
  const auto world_size = number("WORLD_SIZE");
  const auto local_world_size = number("LOCAL_WORLD_SIZE");
  const auto group_rank = number("GROUP_RANK");
  const auto master_port = number("MASTER_PORT");

  if (rank && world_size && *rank >= *world_size) {
    problems.push_back(fmt::format("RANK {} is not below WORLD_SIZE {}", *rank, *world_size));
  }
  if (local_rank && local_world_size && *local_rank >= *local_world_size) {
    problems.push_back(fmt::format("LOCAL_RANK {} is not below LOCAL_WORLD_SIZE {}", *local_rank,
                                   *local_world_size));
  }
  if (world_size && local_world_size &&
      (*local_world_size == 0 || *world_size % *local_world_size != 0)) {
    problems.push_back(fmt::format("WORLD_SIZE {} is not a multiple of LOCAL_WORLD_SIZE {}",
                                   *world_size, *local_world_size));
  }
  if (rank && local_rank && local_world_size && group_rank &&
      *rank != *group_rank * *local_world_size + *local_rank) {
    problems.push_back(fmt::format("RANK {} != GROUP_RANK {} * LOCAL_WORLD_SIZE {} + LOCAL_RANK {}",
                                   *rank, *group_rank, *local_world_size, *local_rank));
  }
  if (master_port && (*master_port < 1 || *master_port > 65535)) {
    problems.push_back(fmt::format("MASTER_PORT {} is not in 1..65535", *master_port));
  }
  const char* master_addr = std::getenv("MASTER_ADDR");
  if (master_addr == nullptr || *master_addr == '\0') problems.push_back("MASTER_ADDR is empty");
  const char* launcher = std::getenv("COLO_LAUNCHER");
  if (launcher == nullptr || std::string(launcher) != "colo-run") {
    problems.push_back("COLO_LAUNCHER is not 'colo-run'");
  }
  if (const char* rdzv = std::getenv("COLO_RDZV_FILE")) {
    // Nobody rendezvoused yet, so the store file must not exist, but its directory must.
    struct stat st {};
    const std::string dir = parent_directory(rdzv);
    if (path_exists(rdzv))
      problems.push_back(fmt::format("COLO_RDZV_FILE '{}' already exists", rdzv));
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      problems.push_back(fmt::format("COLO_RDZV_FILE's directory '{}' does not exist", dir));
    }
  }
  // The launcher's stop and cleanup guarantees rest on these two.
  if (::getpgrp() != ::getpid()) problems.push_back("the rank does not lead its own process group");
  int deathsig = 0;
  if (::prctl(PR_GET_PDEATHSIG, &deathsig) != 0 || deathsig != SIGKILL) {
    problems.push_back(fmt::format("PR_SET_PDEATHSIG is {}, not SIGKILL", deathsig));
  }
  if (rank) {
    const std::string marker = check_dir + "/rank-" + std::to_string(*rank);
    int fd = ::open(marker.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0) {
      problems.push_back(fmt::format("cannot create '{}': {} (another rank has RANK {}?)", marker,
                                     errno_text(errno), *rank));
    } else {
      ::close(fd);
    }
  }

  if (!problems.empty()) {
    print_to(STDERR_FILENO, "check failed: {}\n", join(problems, "; "));
    return 1;
  }
  print_to(STDOUT_FILENO,
           "environment ok: rank {} of {}, local rank {} of {}, node {}, master {}:{}\n", *rank,
           *world_size, *local_rank, *local_world_size, *group_rank, master_addr, *master_port);
  return 0;
}

}  // namespace colo::launcher
