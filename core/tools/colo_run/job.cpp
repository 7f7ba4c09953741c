#include "job.h"

#include <colo/files/files.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <optional>
#include <utility>

#include "node_capacity.h"
#include "output.h"
#include "posix.h"
#include "rank_output.h"
#include "spawn.h"

extern char** environ;

namespace colo::launcher {
namespace {

using Clock = std::chrono::steady_clock;

struct Rank {
  int global_rank = 0;
  pid_t pid = -1;
  bool reaped = false;
  OutputStream out, err;
  // Since when a signal (SIGSTOP, SIGTSTP, ...) holds the rank stopped, and which; unset while it
  // runs. Its peers wait for it until their timeout, and NCCL's watchdog may then blame them.
  std::optional<std::chrono::steady_clock::time_point> stopped_since;
  int stop_signal = 0;
};

// Why the job stopped, kept for the first cause only: later failures are usually ranks that
// lost a peer, and reporting them would hide the real one.
struct Cause {
  std::string message;
  int exit_code = 1;
  std::string aftermath;  // what colo-run did about it, for the final report
  // A rank failed (exit, signal, held stopped past the timeout): what --max-restarts restarts.
  // colo-run's own interruption, a closed output or a program that cannot start are not.
  bool rank_failed = false;
};

// After the last rank exits and its process group is killed, how long to wait for descendants
// that escaped the group (setsid daemons) to exit and close the inherited pipes before colo-run
// leaves them be.
constexpr auto kDrainTimeout = std::chrono::seconds(1);
// How long a rank's failure waits, before it is taken as the job's cause, for the peer it lost
// (lost_peer_of) to exit: a peer that closed its connections is on its way out, though a LibTorch
// process takes a while to get there.
constexpr auto kLostPeerSettle = std::chrono::seconds(5);

class Job {
 public:
  Job(const LaunchConfig& config, NodeLink* link) : config_(config), link_(link) {}

  JobOutcome run() {
    setup_signals();
    spawn_all();
    supervise();
    restore_signals();
    // The last lines, forwarded after every rank had exited, found no reader.
    if (!cause_ && output_.reader_gone_while_forwarding()) {
      cause_ = output_gone_cause("");
      tell_link();
    }
    if (cause_) {
      print_to(STDERR_FILENO, "colo-run: {}{}\n", cause_->message, cause_->aftermath);
      return JobOutcome{cause_->exit_code, cause_->rank_failed, cause_->message, cause_from_link_};
    }
    return JobOutcome{};
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

    // Grown one rank at a time: a rank that was never started (the exec failed earlier) is
    // not waited for.
    ranks_.reserve(static_cast<std::size_t>(config_.nproc_per_node));
    for (int local = 0; local < config_.nproc_per_node; ++local) {
      Rank& rank = ranks_.emplace_back();
      rank.global_rank = first_rank_of(config_) + local;

      // Everything the child needs is built before fork(): between fork and exec the child
      // only makes system calls.
      std::vector<std::string> env_strings = rank_environment(config_, local, environ);
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

  // Forks and execs one rank (spawn.h). Returns 0 once the exec succeeded, or the exec's errno
  // (the child is reaped then).
  int spawn(Rank& rank, char* const* argv, char* const* envp) {
    Spawned spawned = spawn_rank(rank.global_rank, argv, envp, config_.prefix_output, saved_mask_);
    rank.pid = spawned.pid;
    if (config_.prefix_output) {
      rank.out = OutputForwarder::open(spawned.out_fd, STDOUT_FILENO, rank.global_rank);
      rank.err = OutputForwarder::open(spawned.err_fd, STDERR_FILENO, rank.global_rank);
    }
    rank.reaped = spawned.exec_error != 0;
    return spawned.exec_error;
  }

  bool all_reaped() const {
    return std::all_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.reaped; });
  }

  void supervise() {
    std::optional<Clock::time_point> drain_deadline;
    for (;;) {
      if (all_reaped()) {
        settle_traced();
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
      // The other nodes' colo-run (NodeLink), watched while this node's ranks run.
      const std::vector<int> link_fds = link_ ? link_->descriptors() : std::vector<int>{};
      for (int fd : link_fds) fds.push_back({fd, POLLIN, 0});
      const std::size_t first_stream = fds.size();
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
      const auto& output_gone = output_.output_gone_deadline();
      if (!cause_ && output_gone && (!wake || *output_gone < *wake)) {
        wake = output_gone;
      }
      if (traced_ && (!wake || traced_->deadline < *wake)) wake = traced_->deadline;
      const auto stopped_until = cause_ ? std::nullopt : stopped_deadline();
      if (stopped_until && (!wake || *stopped_until < *wake)) wake = stopped_until;
      int timeout_ms = -1;
      if (wake) {
        auto left = std::chrono::ceil<std::chrono::milliseconds>(*wake - Clock::now()).count();
        timeout_ms = static_cast<int>(std::max<long long>(0, left));
      }
      if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) {
        throw std::runtime_error("poll failed: " + errno_text(errno));
      }
      for (std::size_t i = first_stream; i < fds.size(); ++i) {
        if (fds[i].revents != 0) output_.read(*streams[i - first_stream]);
      }
      for (std::size_t i = 1; i < first_stream; ++i) {
        if (fds[i].revents != 0) stop_for_link(link_->readable(fds[i].fd));
      }
      if (fds[0].revents & POLLIN) handle_signals();
      if (traced_ && Clock::now() >= traced_->deadline) settle_traced();
      if (const auto until = stopped_deadline(); !cause_ && until && Clock::now() >= *until) {
        commit_stopped(*stopped_rank(), "");
      }
      stop_if_output_gone();
      if (kill_deadline_ && Clock::now() >= *kill_deadline_) {
        kill_deadline_.reset();
        signal_all(SIGKILL);
      }
    }
    for (Rank& rank : ranks_) {
      output_.close(rank.out);
      output_.close(rank.err);
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
      const pid_t pid = ::waitpid(-1, &status, WNOHANG | WUNTRACED | WCONTINUED);
      if (pid < 0 && errno == EINTR) continue;
      if (pid < 0) children_left_ = false;  // ECHILD: the whole tree is gone
      if (pid <= 0) return;
      auto rank = std::find_if(ranks_.begin(), ranks_.end(),
                               [pid](const Rank& r) { return r.pid == pid && !r.reaped; });
      if (rank == ranks_.end()) continue;
      if (WIFSTOPPED(status)) {
        rank->stopped_since = Clock::now();
        rank->stop_signal = WSTOPSIG(status);
      } else if (WIFCONTINUED(status)) {
        rank->stopped_since.reset();
      } else {
        on_rank_exit(*rank, status);
      }
    }
  }

  // The rank stopped longest, if one is.
  const Rank* stopped_rank() const {
    const Rank* longest = nullptr;
    for (const Rank& r : ranks_) {
      if (!r.reaped && r.stopped_since && (!longest || *r.stopped_since < *longest->stopped_since)) longest = &r;
    }
    return longest;
  }
  std::optional<Clock::time_point> stopped_deadline() const {
    const Rank* stopped = stopped_rank();
    if (!stopped) return std::nullopt;
    return *stopped->stopped_since + std::chrono::milliseconds(config_.timeout_ms);
  }

  // A stopped rank is the cause once it has been stopped for the job's timeout, or as soon as
  // another rank fails meanwhile (`failed`: that rank's words), which is what its peers do when
  // their collectives time out waiting for it.
  void commit_stopped(const Rank& stopped, const std::string& failed) {
    const double seconds = std::chrono::duration<double>(Clock::now() - *stopped.stopped_since).count();
    const std::string then =
        failed.empty() ? fmt::format("; the job's timeout (COLO_TIMEOUT_MS) is {} ms", config_.timeout_ms)
                       : fmt::format(" ({} meanwhile, waiting for it)", failed);
    commit(Cause{fmt::format("rank {} (pid {}) was stopped by signal {} ({}) {:.1f} s ago and not continued{}",
                             stopped.global_rank, stopped.pid, stopped.stop_signal, signal_name(stopped.stop_signal),
                             seconds, then),
                 128 + stopped.stop_signal, "; stopped the other ranks", true});
  }

  void on_rank_exit(Rank& rank, int status) {
    rank.reaped = true;
    if (cause_) return;  // ranks exiting after the first cause are its aftermath
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      // The peer the traced rank lost was fine: the rank that failed is the cause.
      if (traced_ && traced_->first_lost == rank.global_rank) settle_traced();
      return;
    }
    // A rank that failed because a connection went away (it left a note naming the peer, or
    // saying it could not tell) is not the cause while another rank may still fail on its own,
    // only faster to exit: the first such failure is traced, later ones are its aftermath, and
    // the first failure without such a note, within kLostPeerSettle, is named the cause.
    const std::optional<int> lost = lost_peer_of(config_.run_reports, rank.global_rank);
    if (traced_ && lost) {
      if (!another_running(rank.global_rank)) settle_traced();
      return;
    }
    // The rank's last words (often the reason it failed) go out before colo-run's report.
    // Bounded: a surviving grandchild may keep writing.
    for (OutputStream* stream : {&rank.out, &rank.err}) {
      for (int chunk = 0; chunk < 64 && stream->fd >= 0 && output_.read(*stream); ++chunk) {
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
    if (const Rank* stopped = stopped_rank()) {
      commit_stopped(*stopped, fmt::format("rank {} (pid {}) {}", rank.global_rank, rank.pid, what));
      return;
    }
    Cause cause{fmt::format("rank {} (pid {}) {}", rank.global_rank, rank.pid, what), code,
                config_.nproc_per_node > 1 ? "; stopped the other ranks" : "", true};
    if (traced_) {
      const std::string to =
          traced_->first_lost == kUnknownPeer ? "a peer" : fmt::format("rank {}", traced_->first_lost);
      cause.message += fmt::format(" (rank {} exited before it, having lost its connection to {})",
                                   traced_->first_rank, to);
      traced_.reset();
      commit(std::move(cause));
      return;
    }
    const bool peer_may_fail = lost && (*lost == kUnknownPeer ? another_running(rank.global_rank) : running(*lost));
    if (peer_may_fail) {
      traced_ = Traced{cause, rank.global_rank, *lost, Clock::now() + kLostPeerSettle};
      return;
    }
    commit(std::move(cause));
  }

  bool another_running(int global_rank) const {
    return std::any_of(ranks_.begin(), ranks_.end(), [global_rank](const Rank& r) {
      return r.global_rank != global_rank && r.pid > 0 && !r.reaped;
    });
  }

  bool running(int global_rank) const {
    return std::any_of(ranks_.begin(), ranks_.end(), [global_rank](const Rank& r) {
      return r.global_rank == global_rank && r.pid > 0 && !r.reaped;
    });
  }

  // The traced failure becomes the cause as it stands (its peer did not fail in time, or exited
  // cleanly).
  void settle_traced() {
    if (!traced_ || cause_) return;
    Cause cause = std::move(traced_->cause);
    traced_.reset();
    commit(std::move(cause));
  }

  void commit(Cause cause) {
    cause_ = std::move(cause);
    if (config_.nproc_per_node > 1) {
      print_to(STDERR_FILENO, "colo-run: {}; stopping the other ranks\n", cause_->message);
    }
    begin_stop();
  }

  // Another node's colo-run said this node's ranks must stop (`why`): they are stopped as for a
  // cause here, which it is not (the job's outcome is node 0's to decide).
  void stop_for_link(const std::optional<std::string>& why) {
    if (!why || cause_) return;
    cause_ = Cause{*why, 1, "; stopped this node's ranks", false};
    cause_from_link_ = true;
    print_to(STDERR_FILENO, "colo-run: {}; stopping this node's ranks\n", *why);
    begin_stop();
  }

  // A cause arose here: the other nodes hear of it now, not after this node's grace period.
  void tell_link() {
    if (!link_ || !cause_ || cause_from_link_ || link_told_) return;
    link_told_ = true;
    link_->failed_here(NodeReport{cause_->exit_code, cause_->rank_failed ? "failed" : "fatal", cause_->message});
  }

  // SIGTERM first so ranks can flush logs and checkpoints; SIGKILL after the grace period.
  void begin_stop() {
    tell_link();
    if (config_.grace_period_s <= 0) {
      signal_all(SIGKILL);
      return;
    }
    signal_all(SIGTERM);
    // A stopped rank takes SIGTERM only once continued (SIGKILL needs no SIGCONT).
    for (const Rank& rank : ranks_) {
      if (!rank.reaped && rank.stopped_since) {
        ::kill(-rank.pid, SIGCONT);
        ::kill(rank.pid, SIGCONT);
      }
    }
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

  // A rank writing into a closed pipe itself (as with --no-prefix) is killed by SIGPIPE, and
  // colo-run then stops the others. With prefixing colo-run writes for the ranks, so it does the
  // same when its own stdout or stderr lost its reader: the job ends as it would without colo-run
  // in between (`colo-run ... | head -1` returns), with 128 + SIGPIPE. A rank that failed first,
  // or within kOutputGoneSettle after, remains the cause: its exit code is the job's.
  void stop_if_output_gone() {
    const auto& deadline = output_.output_gone_deadline();
    if (cause_ || !deadline || Clock::now() < *deadline) return;
    cause_ = output_gone_cause(
        "; stopped the ranks, as a closed pipe stops a program that writes to it");
    print_to(STDERR_FILENO, "colo-run: {}; stopping the ranks\n", cause_->message);
    begin_stop();
  }

  Cause output_gone_cause(const char* aftermath) const {
    return Cause{
        fmt::format("the reader of colo-run's output went away (EPIPE) while it was forwarding {}",
                    *output_.reader_gone_while_forwarding()),
        128 + SIGPIPE, aftermath};
  }

  const LaunchConfig& config_;
  NodeLink* link_ = nullptr;
  bool cause_from_link_ = false;  // cause_ came from another node (stop_for_link)
  bool link_told_ = false;
  std::vector<Rank> ranks_;
  OutputForwarder output_;
  int signal_fd_ = -1;
  bool children_left_ = true;
  sigset_t saved_mask_{};
  std::optional<Clock::time_point> kill_deadline_;
  std::optional<Cause> cause_;
  // A failure that may follow from another's: its rank lost its connection to a peer (named or
  // not) that may still fail on its own; settled when that peer exits cleanly, when no other rank
  // is left, or at `deadline`.
  struct Traced {
    Cause cause;      // the traced rank's, named if no other rank fails on its own in time
    int first_rank;   // the rank traced
    int first_lost;   // the peer it lost, or kUnknownPeer
    Clock::time_point deadline;
  };
  std::optional<Traced> traced_;
};

}  // namespace

JobOutcome supervise(const LaunchConfig& config, NodeLink* link) { return Job(config, link).run(); }

}  // namespace colo::launcher
