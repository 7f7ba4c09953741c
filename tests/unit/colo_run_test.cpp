// Tests of the colo-run launcher, run as a black box: each test starts the built binary and
// checks its exit status, its output, and (through pid files the ranks write) that no process
// of the job survives it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <colo/files/files.h>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "command_output.h"
#include "node_capacity.h"

extern char** environ;

namespace {

namespace files = colo::files;
using command_output::count_of;
using Clock = std::chrono::steady_clock;

const std::string kColoRun = COLO_BINARY_DIR "/bin/colo-run";

// Time bounds, each with its margin stated. The ranks of the stopping tests park in a `sleep 30`
// (record_pids): a job that stopped them ends long before it, one that waited for them after it.
// kStoppedWithinS splits the two with 10 s to spare on either side of what an idle machine takes
// (well under 1 s) and the 30 s a missed stop takes, so that a loaded CI machine (8 test ranks on
// 2 cores) does not fail a correct stop. Waits for an event (files appearing, a process ending)
// poll until it happens and give up only after kEventWaitS: a passing run never waits that long.
constexpr double kStoppedWithinS = 20.0;
constexpr double kEventWaitS = 30.0;

struct Result {
  int exit_code = -1;  // -1 when colo-run itself was killed by a signal
  std::string out;
  std::string err;
  double seconds = 0;
};

// colo-run as a child of the test, with its stdout and stderr captured. `cpu` pins colo-run (and
// so its ranks) to that one core.
class ColoRunProcess {
 public:
  explicit ColoRunProcess(const std::vector<std::string>& args,
                          const std::map<std::string, std::string>& extra_env = {},
                          std::optional<int> cpu = std::nullopt) {
    std::vector<std::string> argv_strings = {kColoRun};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string item = *e;
      if (extra_env.count(item.substr(0, item.find('='))) == 0) env_strings.push_back(item);
    }
    for (const auto& [name, value] : extra_env) env_strings.push_back(name + "=" + value);
    std::vector<char*> argv, envp;
    for (auto& s : argv_strings) argv.push_back(s.data());
    argv.push_back(nullptr);
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);

    int out_pipe[2], err_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
      throw std::runtime_error("pipe2 failed");
    }
    start_ = Clock::now();
    pid_ = ::fork();
    if (pid_ == 0) {
      if (cpu) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(*cpu, &set);
        if (::sched_setaffinity(0, sizeof set, &set) != 0) ::_exit(125);
      }
      ::dup2(out_pipe[1], STDOUT_FILENO);
      ::dup2(err_pipe[1], STDERR_FILENO);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(126);
    }
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    out_fd_ = out_pipe[0];
    err_fd_ = err_pipe[0];
  }

  pid_t pid() const { return pid_; }

  // Collects the output until colo-run exits; past `timeout_s` it is killed and the test fails.
  Result wait(double timeout_s = 2 * kEventWaitS) {
    Result result;
    const auto deadline = start_ + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(timeout_s));
    bool killed = false;
    while (out_fd_ >= 0 || err_fd_ >= 0) {
      std::vector<pollfd> fds;
      if (out_fd_ >= 0) fds.push_back({out_fd_, POLLIN, 0});
      if (err_fd_ >= 0) fds.push_back({err_fd_, POLLIN, 0});
      ::poll(fds.data(), fds.size(), 100);
      for (const pollfd& p : fds) {
        if (p.revents == 0) continue;
        char buffer[4096];
        ssize_t n = ::read(p.fd, buffer, sizeof buffer);
        std::string& sink = p.fd == out_fd_ ? result.out : result.err;
        int& fd = p.fd == out_fd_ ? out_fd_ : err_fd_;
        if (n > 0) {
          sink.append(buffer, static_cast<std::size_t>(n));
        } else if (n == 0 || errno != EINTR) {
          ::close(fd);
          fd = -1;
        }
      }
      if (!killed && Clock::now() > deadline) {
        ADD_FAILURE() << "colo-run did not finish within " << timeout_s << " s; killing it";
        ::kill(pid_, SIGKILL);
        killed = true;
      }
    }
    int status = 0;
    ::waitpid(pid_, &status, 0);
    result.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return result;
  }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  Clock::time_point start_;
};

Result run_colo(const std::vector<std::string>& args,
                const std::map<std::string, std::string>& extra_env = {}) {
  return ColoRunProcess(args, extra_env).wait();
}

// colo-run with stdout and stderr into one pipe (`colo-run ... 2>&1 | head -1`): the test reads
// the first line, then closes the pipe's only read end, as `head -1` does when it exits.
class ColoRunIntoClosedPipe {
 public:
  explicit ColoRunIntoClosedPipe(const std::vector<std::string>& args) {
    std::vector<std::string> argv_strings = {kColoRun};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& s : argv_strings) argv.push_back(s.data());
    argv.push_back(nullptr);
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
    start_ = Clock::now();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(pipe_fds[1], STDOUT_FILENO);
      ::dup2(pipe_fds[1], STDERR_FILENO);
      ::execv(argv[0], argv.data());
      ::_exit(126);
    }
    ::close(pipe_fds[1]);
    read_fd_ = pipe_fds[0];
  }
  ~ColoRunIntoClosedPipe() {
    if (read_fd_ >= 0) ::close(read_fd_);
    if (!reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  // Reads up to and including the first newline (bounded by `timeout_s`), then closes the pipe.
  std::string read_first_line_and_close(double timeout_s = kEventWaitS) {
    std::string line;
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(timeout_s));
    char c = 0;
    while (Clock::now() < deadline && c != '\n') {
      pollfd p{read_fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      if (::read(read_fd_, &c, 1) != 1) break;
      line += c;
    }
    ::close(read_fd_);
    read_fd_ = -1;
    return line;
  }

  // colo-run's raw wait status, or nullopt when it did not end within `timeout_s`.
  std::optional<int> wait_status(double timeout_s = 2 * kEventWaitS) {
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(timeout_s));
    while (Clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        seconds_ = std::chrono::duration<double>(Clock::now() - start_).count();
        return status;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return std::nullopt;
  }
  double seconds() const { return seconds_; }

 private:
  pid_t pid_ = -1;
  int read_fd_ = -1;
  bool reaped_ = false;
  double seconds_ = 0;
  Clock::time_point start_;
};

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

// colo-run's own warnings (more ranks than cores on a small machine) are not the ranks' output.
std::string without_warnings(const std::string& text) {
  std::string kept;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("colo-run: warning: ", 0) != 0) kept += line + "\n";
  }
  return kept;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Gone entirely: colo-run (or init) reaped it.
bool process_gone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

// Dead, possibly a zombie waiting for a parent that is not colo-run's to reap it.
bool process_dead(pid_t pid) {
  if (process_gone(pid)) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string pid_field, comm, state;
  stat >> pid_field >> comm >> state;
  return state == "Z";
}

class ColoRunJob : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = files::join(files::temp_directory(), "colo-run-test-XXXXXX");
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    // Whatever a failed test left running must not outlive it.
    for (pid_t pid : all_pids()) ::kill(pid, SIGKILL);
    files::remove_all(dir_);
  }

  // Shell code that records the rank's pid as pid.<RANK> and starts a background `sleep` (a
  // grandchild of colo-run, recorded as child.<RANK>). Files are renamed into place so that a
  // reader never sees them half written.
  std::string record_pids() const {
    const std::string d = dir_;
    return "echo $$ > " + d + "/pid.$RANK.tmp && mv " + d + "/pid.$RANK.tmp " + d +
           "/pid.$RANK; sleep 30 & echo $! > " + d + "/child.$RANK.tmp && mv " + d +
           "/child.$RANK.tmp " + d + "/child.$RANK; ";
  }
  // Shell code that waits until the given ranks have recorded their pids.
  std::string wait_for_ranks(const std::vector<int>& ranks) const {
    std::string condition;
    for (int r : ranks) {
      if (!condition.empty()) condition += " || ";
      condition += "[ ! -e " + files::join(dir_, ("child." + std::to_string(r))) + " ]";
    }
    return "while " + condition + "; do sleep 0.02; done; ";
  }

  pid_t read_pid(const std::string& name) const {
    std::ifstream in(files::join(dir_, name));
    pid_t pid = -1;
    in >> pid;
    return pid;
  }
  std::vector<pid_t> all_pids() const {
    std::vector<pid_t> pids;
    for (const auto& name : files::list_directory(dir_)) {
      if (name.find(".tmp") != std::string::npos) continue;
      if (name.rfind("pid.", 0) == 0 || name.rfind("child.", 0) == 0) {
        pid_t pid = read_pid(name);
        if (pid > 0) pids.push_back(pid);
      }
    }
    return pids;
  }
  // Waits (bounded) until every rank has written its pid files.
  bool wait_for_pid_files(int nranks, double timeout_s = kEventWaitS) const {
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(timeout_s));
    while (Clock::now() < deadline) {
      bool all = true;
      for (int r = 0; r < nranks; ++r)
        all = all && files::exists(files::join(dir_, ("child." + std::to_string(r))));
      if (all) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  void expect_all_gone(int nranks) const {
    ASSERT_EQ(all_pids().size(), static_cast<std::size_t>(2 * nranks))
        << "every rank records 2 pids";
    for (pid_t pid : all_pids()) EXPECT_TRUE(process_gone(pid)) << "pid " << pid << " survived";
  }

  std::string dir_;
};

TEST(ColoRun, AllRanksSucceedAndEveryLineIsPrefixed) {
  Result r = run_colo({"--nproc-per-node", "3", "sh", "-c",
                       "echo \"out $RANK a\"; echo \"err $RANK\" >&2; echo \"out $RANK b\"; "
                       "printf \"tail $RANK\""});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Lines of different ranks may interleave, but each line is whole and each rank's lines
  // keep their order; the unterminated tail comes last, completed with a newline.
  std::vector<std::string> out = lines_of(r.out);
  EXPECT_EQ(r.out.back(), '\n');
  ASSERT_EQ(out.size(), 9u) << r.out;
  for (int rank = 0; rank < 3; ++rank) {
    const std::string p = "[rank " + std::to_string(rank) + "] ";
    const std::string s = std::to_string(rank);
    std::vector<std::string> mine;
    std::copy_if(out.begin(), out.end(), std::back_inserter(mine),
                 [&](const std::string& l) { return l.rfind(p, 0) == 0; });
    EXPECT_EQ(mine, (std::vector<std::string>{p + "out " + s + " a", p + "out " + s + " b",
                                              p + "tail " + s}));
  }
  std::vector<std::string> err = lines_of(without_warnings(r.err));
  std::sort(err.begin(), err.end());
  EXPECT_EQ(err, (std::vector<std::string>{"[rank 0] err 0", "[rank 1] err 1", "[rank 2] err 2"}));
}

TEST(ColoRun, NoPrefixPassesOutputThroughUntouched) {
  Result r = run_colo({"--no-prefix", "--nproc-per-node", "1", "sh", "-c",
                       "printf 'raw line\\npartial'; printf 'e\\n' >&2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "raw line\npartial");
  EXPECT_EQ(r.err, "e\n");
}

// colo-run tells its ranks that it prefixes their lines (colo's Logger then leaves its own
// "[rank R] " out); with --no-prefix it does not, and an inherited value never passes through.
TEST(ColoRun, TellsTheRanksWhetherItPrefixesTheirLines) {
  Result r = run_colo({"--nproc-per-node", "1", "sh", "-c", "echo \"prefixes ${COLO_RUN_PREFIXES_OUTPUT-unset}\""},
                      {{"COLO_RUN_PREFIXES_OUTPUT", "7"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[rank 0] prefixes 1\n");
  r = run_colo({"--no-prefix", "--nproc-per-node", "1", "sh", "-c",
                "echo \"prefixes ${COLO_RUN_PREFIXES_OUTPUT-unset}\""},
               {{"COLO_RUN_PREFIXES_OUTPUT", "1"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "prefixes unset\n");
}

TEST(ColoRun, ProgramArgumentsAreNotParsedAsOptions) {
  Result r = run_colo(
      {"--nproc-per-node", "1", "sh", "-c", "echo \"$@\"", "sh", "--foo", "--nproc-per-node", "9"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[rank 0] --foo --nproc-per-node 9\n");
  // "--" ends colo-run's options explicitly.
  r = run_colo({"--", "sh", "-c", "echo $WORLD_SIZE"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[rank 0] 1\n");
}

TEST(ColoRun, SetsTheTorchrunEnvironmentAndARendezvousFile) {
  // Values inherited from colo-run's own environment must not leak into the ranks.
  Result r = run_colo({"--nproc-per-node", "2", "--rdzv-file", "auto", "sh", "-c",
                       "echo \"$RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK "
                       "$MASTER_ADDR $MASTER_PORT $COLO_LAUNCHER $COLO_RDZV_FILE\""},
                      {{"RANK", "99"}, {"MASTER_PORT", "1"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> out = lines_of(r.out);
  std::sort(out.begin(), out.end());
  ASSERT_EQ(out.size(), 2u) << r.out;
  std::vector<std::string> ports, rdzv_files;
  for (int rank = 0; rank < 2; ++rank) {
    std::istringstream fields(out[static_cast<std::size_t>(rank)]);
    std::string tag, tag_rank, rank_var, local, world, local_world, group, addr, port, launcher,
        rdzv;
    fields >> tag >> tag_rank >> rank_var >> local >> world >> local_world >> group >> addr >>
        port >> launcher >> rdzv;
    EXPECT_EQ(tag + " " + tag_rank, "[rank " + std::to_string(rank) + "]");
    EXPECT_EQ(rank_var, std::to_string(rank));
    EXPECT_EQ(local, std::to_string(rank));
    EXPECT_EQ(world, "2");
    EXPECT_EQ(local_world, "2");
    EXPECT_EQ(group, "0");
    EXPECT_EQ(addr, "127.0.0.1");
    ASSERT_FALSE(port.empty());
    EXPECT_TRUE(std::all_of(port.begin(), port.end(), ::isdigit)) << port;
    const int port_number = std::atoi(port.c_str());
    EXPECT_GT(port_number, 1);
    EXPECT_LE(port_number, 65535);
    EXPECT_EQ(launcher, "colo-run");
    EXPECT_EQ(rdzv.front(), '/') << rdzv;
    ports.push_back(port);
    rdzv_files.push_back(rdzv);
  }
  EXPECT_EQ(ports[0], ports[1]);
  EXPECT_EQ(rdzv_files[0], rdzv_files[1]);
  EXPECT_FALSE(files::exists(rdzv_files[0]));
  EXPECT_FALSE(files::exists(files::parent_path(rdzv_files[0]))) << "auto directory removed";
}

// A hung NCCL rank must end the job at the collective timeout, not 60 s later after PyTorch's
// flight-recorder dump wait: colo-run's ranks get TORCH_NCCL_DUMP_ON_TIMEOUT=0 and a 1 s
// TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC, unless the user set any of those or the recorder's size.
TEST(ColoRun, RanksSkipTheNcclDumpWaitUnlessTheUserConfiguresIt) {
  for (const char* name : {"TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC",
                           "TORCH_NCCL_TRACE_BUFFER_SIZE"}) {
    ::unsetenv(name);
  }
  const std::vector<std::string> echo = {
      "--nproc-per-node", "2", "sh", "-c",
      "echo \"nccl ${TORCH_NCCL_DUMP_ON_TIMEOUT-unset} ${TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC-unset}\""};
  Result r = run_colo(echo);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_of(r.out, "nccl 0 1000"), 2u) << r.out;
  // Any one of them given: the user's setup stands and nothing is added.
  r = run_colo(echo, {{"TORCH_NCCL_DUMP_ON_TIMEOUT", "1"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_of(r.out, "nccl 1 unset"), 2u) << r.out;
  r = run_colo(echo, {{"TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC", "30000"}});
  EXPECT_EQ(count_of(r.out, "nccl unset 30000"), 2u) << r.out;
  r = run_colo(echo, {{"TORCH_NCCL_TRACE_BUFFER_SIZE", "2000"}});
  EXPECT_EQ(count_of(r.out, "nccl unset unset"), 2u) << r.out;
}

TEST(ColoRun, RanksOfALaterNodeStartAtNodeRankTimesNproc) {
  Result r = run_colo({"--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "2",
                       "--master-addr", "127.0.0.1", "--master-port", "29555", "sh", "-c",
                       "echo \"$RANK $LOCAL_RANK $WORLD_SIZE $GROUP_RANK $MASTER_PORT "
                       "${COLO_RDZV_FILE-unset}\""},
                      {{"COLO_RDZV_FILE", "/stale/from/outside"}, {"COLO_JOB_TOKEN", std::string(64, 'a')}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> out = lines_of(r.out);
  std::sort(out.begin(), out.end());
  EXPECT_EQ(out, (std::vector<std::string>{"[rank 2] 2 0 4 1 29555 unset",
                                           "[rank 3] 3 1 4 1 29555 unset"}));
}

TEST_F(ColoRunJob, FailingRankStopsTheOthersAndIsReportedByRank) {
  const std::string script = record_pids() + "if [ \"$RANK\" = 1 ]; then " +
                             wait_for_ranks({0, 2}) + "echo dying >&2; exit 3; fi; wait";
  Result r = run_colo({"--nproc-per-node", "3", "sh", "-c", script});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_LT(r.seconds, kStoppedWithinS);
  const std::string pid1 = std::to_string(read_pid("pid.1"));
  const std::string report =
      "colo-run: rank 1 (pid " + pid1 + ") exited with code 3; stopped the other ranks\n";
  EXPECT_NE(r.err.find(report), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[rank 1] dying\n"), std::string::npos) << "the rank's last words";
  expect_all_gone(3);
}

TEST_F(ColoRunJob, RankKilledBySignalStopsTheOthers) {
  const std::string script = record_pids() + "if [ \"$RANK\" = 1 ]; then " +
                             wait_for_ranks({0, 2}) + "kill -9 $$; fi; wait";
  Result r = run_colo({"--nproc-per-node", "3", "sh", "-c", script});
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.err;
  EXPECT_LT(r.seconds, kStoppedWithinS);
  const std::string pid1 = std::to_string(read_pid("pid.1"));
  EXPECT_NE(r.err.find("rank 1 (pid " + pid1 + ") was killed by signal 9 (SIGKILL)"),
            std::string::npos)
      << r.err;
  expect_all_gone(3);
}

TEST_F(ColoRunJob, RankIgnoringSigtermIsKilledAfterTheGracePeriod) {
  // Rank 0 and its sleep ignore SIGTERM (dispositions are inherited), so only the SIGKILL
  // after --grace-period ends them.
  const std::string script = "if [ \"$RANK\" = 0 ]; then trap '' TERM; fi; " + record_pids() +
                             "if [ \"$RANK\" = 1 ]; then " + wait_for_ranks({0}) +
                             "exit 5; fi; wait";
  Result r = run_colo({"--nproc-per-node", "2", "--grace-period", "1", "sh", "-c", script});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_GE(r.seconds, 1.0) << "SIGKILL came before the grace period ended";
  EXPECT_LT(r.seconds, kStoppedWithinS);
  expect_all_gone(2);
}

TEST_F(ColoRunJob, SigintStopsAllRanks) {
  ColoRunProcess job({"--nproc-per-node", "3", "sh", "-c", record_pids() + "wait"});
  ASSERT_TRUE(wait_for_pid_files(3)) << "the ranks did not start";
  ::kill(job.pid(), SIGINT);
  Result r = job.wait();
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_NE(r.err.find("received SIGINT"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, kStoppedWithinS);
  expect_all_gone(3);
}

TEST_F(ColoRunJob, RanksDieWithTheLauncher) {
  // PR_SET_PDEATHSIG: even a SIGKILLed colo-run, which can clean nothing up, takes its ranks
  // along. (Not their own children: that is what colo-run's process-group kill is for.)
  const std::string d = dir_;
  ColoRunProcess job({"--nproc-per-node", "2", "sh", "-c",
                      "echo $$ > " + d + "/rank.$RANK.tmp && mv " + d + "/rank.$RANK.tmp " + d +
                          "/rank.$RANK; exec sleep 30"});
  const auto deadline = Clock::now() + std::chrono::seconds(static_cast<int>(kEventWaitS));
  while (!(files::exists(files::join(dir_, "rank.0")) && files::exists(files::join(dir_, "rank.1"))) && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const pid_t rank0 = read_pid("rank.0"), rank1 = read_pid("rank.1");
  ASSERT_GT(rank0, 0);
  ASSERT_GT(rank1, 0);
  ::kill(job.pid(), SIGKILL);
  job.wait();
  const auto until = Clock::now() + std::chrono::seconds(static_cast<int>(kEventWaitS));
  while (!(process_dead(rank0) && process_dead(rank1)) && Clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(process_dead(rank0));
  EXPECT_TRUE(process_dead(rank1));
  ::kill(rank0, SIGKILL);  // no-ops when the test passes
  ::kill(rank1, SIGKILL);
}

TEST(ColoRun, BadUsageIsRejectedWithAClearMessage) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{}, "no program given"},
      {{"--nproc-per-node", "0", "sh", "-c", "echo ran"}, "--nproc-per-node must be at least 1"},
      {{"--nproc-per-node", "x", "sh", "-c", "echo ran"}, "is invalid"},
      {{"--nnodes", "2", "--node-rank", "2", "--master-port", "29500", "sh", "-c", "echo ran"},
       "--node-rank 2 is out of range for --nnodes 2"},
      {{"--nnodes", "2", "sh", "-c", "echo ran"}, "needs --master-port"},
      {{"--nnodes", "2", "--master-port", "29500", "--rdzv-file", "auto", "sh", "-c", "echo ran"},
       "--rdzv-file works on one node only"},
      {{"--bogus", "sh", "-c", "echo ran"}, "unrecognised option '--bogus'"},
      {{"--nproc", "2", "sh", "-c", "echo ran"}, "unrecognised option '--nproc'"},
      {{"--check", "sh"}, "--check runs colo-run's self-check and takes no program"},
  };
  for (const auto& [args, message] : cases) {
    Result r = run_colo(args);
    EXPECT_EQ(r.exit_code, 2) << ::testing::PrintToString(args) << "\n" << r.err;
    EXPECT_NE(r.err.find("colo-run: error: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "") << "no rank may start on bad usage";
  }
}

TEST(ColoRun, MissingProgramIsReportedOnce) {
  Result r = run_colo({"--nproc-per-node", "2", "colo-no-such-program"});
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_NE(r.err.find("cannot execute 'colo-no-such-program' for rank 0: No such file or "
                       "directory (not found on PATH)"),
            std::string::npos)
      << r.err;
}

TEST_F(ColoRunJob, ExistingRendezvousFileIsRefused) {
  const std::string stale = files::join(dir_, "store");
  std::ofstream(stale) << "old keys";
  Result r = run_colo({"--rdzv-file", stale, "sh", "-c", "echo ran"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("already exists"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_TRUE(files::exists(stale)) << "colo-run must not delete a file it refused to use";
}

TEST(ColoRun, SelfCheckPasses) {
  Result r = run_colo({"--nproc-per-node", "3", "--check"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("colo-run --check: OK"), std::string::npos) << r.out;
  for (int rank = 0; rank < 3; ++rank) {
    const std::string s = std::to_string(rank);
    EXPECT_NE(r.out.find("[rank " + s + "] environment ok: rank " + s + " of 3"), std::string::npos)
        << r.out;
  }
}

// Whatever rank fails first, its reason reaches the user: here rank 2 fails at once while the
// others wait, after more output than a pipe holds, and its last line is its reason.
TEST_F(ColoRunJob, FirstFailingRanksLastLinesArePrintedBeforeTheReport) {
  const std::string script =
      record_pids() + "if [ \"$RANK\" = 2 ]; then " + wait_for_ranks({0, 1}) +
      "i=0; while [ $i -lt 3000 ]; do echo \"noise line $i, long enough to fill the pipe's buffer "
      "several times over\" >&2; i=$((i+1)); done; echo 'error: --batch-size 0: must be at least 1' >&2; "
      "exit 2; fi; wait";
  Result r = run_colo({"--nproc-per-node", "3", "sh", "-c", script});
  EXPECT_EQ(r.exit_code, 2) << r.err.substr(r.err.size() > 2000 ? r.err.size() - 2000 : 0);
  const std::size_t reason = r.err.find("[rank 2] error: --batch-size 0: must be at least 1\n");
  const std::size_t report = r.err.find("colo-run: rank 2 (pid ");
  ASSERT_NE(reason, std::string::npos) << "the failing rank's reason is missing";
  ASSERT_NE(report, std::string::npos);
  EXPECT_LT(reason, report) << "the reason must come before colo-run's report";
  EXPECT_NE(r.err.find("[rank 2] noise line 2999,"), std::string::npos);
  expect_all_gone(3);
}

// `colo-run ... 2>&1 | head -1`: once nothing reads colo-run's output, the ranks' next lines have
// nowhere to go. colo-run must not crash (it once died of an uncaught std::system_error, exit 134)
// nor train on unheard: it stops the ranks as a closed pipe stops a program writing to it (what
// --no-prefix gives: the ranks die of SIGPIPE), and exits with 128 + SIGPIPE.
TEST_F(ColoRunJob, ClosedOutputPipeStopsTheRanksLikeSigpipe) {
  ColoRunIntoClosedPipe job({"--nproc-per-node", "2", "sh", "-c",
                             record_pids() + "while true; do echo \"line $RANK\"; sleep 0.05; done"});
  EXPECT_FALSE(job.read_first_line_and_close().empty());
  ASSERT_TRUE(wait_for_pid_files(2));
  const std::optional<int> status = job.wait_status();
  ASSERT_TRUE(status.has_value()) << "colo-run kept the ranks running after its output pipe closed";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 128 + SIGPIPE) << describe_status(*status);
  EXPECT_LT(job.seconds(), kStoppedWithinS);
  expect_all_gone(2);
}

// The same closed pipe when a rank then fails: colo-run's report cannot be written, yet colo-run
// still stops the other ranks and exits with the failing rank's code. The rank's last words are
// what finds the pipe closed, and it takes a while to exit after them (as a LibTorch process
// does): it is still the cause, not the closed pipe.
TEST_F(ColoRunJob, ClosedOutputPipeKeepsTheFailingRanksExitCode) {
  const std::string closed = files::join(dir_, "pipe-closed");
  const std::string script = record_pids() + "if [ \"$RANK\" = 1 ]; then while [ ! -e " + closed +
                             " ]; do sleep 0.02; done; echo 'error: it went wrong' >&2; sleep 0.5; "
                             "exit 3; fi; echo first; wait";
  ColoRunIntoClosedPipe job({"--nproc-per-node", "2", "sh", "-c", script});
  EXPECT_FALSE(job.read_first_line_and_close().empty());
  ASSERT_TRUE(wait_for_pid_files(2));
  std::ofstream(closed) << "now\n";
  const std::optional<int> status = job.wait_status();
  ASSERT_TRUE(status.has_value()) << "colo-run did not end after rank 1 failed";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 3) << describe_status(*status);
  expect_all_gone(2);
}

// One core in colo-run's affinity mask and two ranks: one warning line, before the ranks start.
TEST(ColoRun, WarnsWhenRanksOutnumberTheCoresItMayUse) {
  cpu_set_t mine;
  CPU_ZERO(&mine);
  ASSERT_EQ(::sched_getaffinity(0, sizeof mine, &mine), 0);
  int cpu = 0;
  while (!CPU_ISSET(cpu, &mine)) ++cpu;
  // No GPU visible, so that cores are what counts on any machine.
  const std::map<std::string, std::string> no_gpus = {{"CUDA_VISIBLE_DEVICES", ""}};
  Result r = ColoRunProcess({"--nproc-per-node", "2", "sh", "-c", "echo ran"}, no_gpus, cpu).wait();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.rfind("colo-run: warning: 2 ranks but 1 CPU core available", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("use --nproc-per-node 1 or fewer"), std::string::npos) << r.err;
  EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
  r = ColoRunProcess({"--nproc-per-node", "1", "sh", "-c", "echo ran"}, no_gpus, cpu).wait();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "") << "one rank on one core needs no warning";
}

TEST(ColoRunCapacity, VisibleGpusFollowCudaVisibleDevices) {
  using colo::launcher::visible_gpus;
  EXPECT_EQ(visible_gpus(0, nullptr), 0);
  EXPECT_EQ(visible_gpus(0, "0,1"), 0) << "no device files: no GPU, whatever the variable says";
  EXPECT_EQ(visible_gpus(4, nullptr), 4);
  EXPECT_EQ(visible_gpus(4, ""), 0);
  EXPECT_EQ(visible_gpus(4, "-1"), 0);
  EXPECT_EQ(visible_gpus(4, "0,2"), 2);
  EXPECT_EQ(visible_gpus(4, "1,-1,2"), 1) << "CUDA stops at the first invalid entry";
  EXPECT_EQ(visible_gpus(2, "0,1,2,3"), 2);
  EXPECT_EQ(visible_gpus(8, "GPU-8a1b,GPU-77c2"), 2);
}

TEST(ColoRunCapacity, WarningNamesWhatRanksWouldShare) {
  using colo::launcher::oversubscription_warning;
  const auto cpu_only = oversubscription_warning(64, {2, 0});
  ASSERT_TRUE(cpu_only.has_value());
  EXPECT_NE(cpu_only->find("64 ranks but 2 CPU cores"), std::string::npos) << *cpu_only;
  const auto gpus = oversubscription_warning(8, {64, 4});
  ASSERT_TRUE(gpus.has_value());
  EXPECT_NE(gpus->find("8 ranks but 4 GPUs visible"), std::string::npos) << *gpus;
  EXPECT_NE(gpus->find("--nproc-per-node 4"), std::string::npos) << *gpus;
  const auto few_cores = oversubscription_warning(8, {4, 8});
  ASSERT_TRUE(few_cores.has_value()) << "8 GPUs but 4 cores still share cores";
  EXPECT_NE(few_cores->find("4 CPU cores"), std::string::npos) << *few_cores;
  EXPECT_FALSE(oversubscription_warning(8, {16, 8}).has_value());
  EXPECT_FALSE(oversubscription_warning(2, {2, 0}).has_value());
}

// ---- Who may join (issue 42) -----------------------------------------------------------------

bool is_hex_token(const std::string& token) {
  return token.size() == 64 && std::all_of(token.begin(), token.end(), [](char c) {
           return std::isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f');
         });
}

// On one node the ranks meet through a store file by default, in a fresh directory only this user
// may enter, and every rank gets the same job token, made for this job.
TEST(ColoRun, OneNodeDefaultsToAPrivateStoreFileAndAJobToken) {
  Result r = run_colo({"--nproc-per-node", "2", "sh", "-c",
                       "echo \"$COLO_RDZV_FILE $COLO_JOB_TOKEN $(stat -c %a \"$(dirname \"$COLO_RDZV_FILE\")\")\""},
                      {{"COLO_JOB_TOKEN", ""}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> out = lines_of(r.out);
  ASSERT_EQ(out.size(), 2u) << r.out;
  std::vector<std::string> files_seen, tokens;
  for (const std::string& line : out) {
    std::istringstream fields(line);
    std::string tag, tag_rank, file, token, mode;
    fields >> tag >> tag_rank >> file >> token >> mode;
    EXPECT_EQ(file.front(), '/') << line;
    EXPECT_TRUE(is_hex_token(token)) << line;
    EXPECT_EQ(mode, "700") << line;
    files_seen.push_back(file);
    tokens.push_back(token);
  }
  EXPECT_EQ(files_seen[0], files_seen[1]);
  EXPECT_EQ(tokens[0], tokens[1]);
  Result again = run_colo({"sh", "-c", "echo $COLO_JOB_TOKEN"}, {{"COLO_JOB_TOKEN", ""}});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.out, "[rank 0] " + tokens[0] + "\n") << "every job gets a token of its own";
}

// --rdzv-file none: no store file (rank 0 serves a TCP store); a token given in colo-run's
// environment is the one every rank gets; a malformed one is refused before any rank starts,
// without echoing it.
TEST(ColoRun, RdzvFileNoneAndAGivenJobToken) {
  const std::string token(40, 'k');
  Result r = run_colo({"--rdzv-file", "none", "--nproc-per-node", "2", "sh", "-c",
                       "echo \"${COLO_RDZV_FILE-unset} $COLO_JOB_TOKEN\""},
                      {{"COLO_JOB_TOKEN", token}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> out = lines_of(r.out);
  std::sort(out.begin(), out.end());
  EXPECT_EQ(out, (std::vector<std::string>{"[rank 0] unset " + token, "[rank 1] unset " + token}));

  r = run_colo({"sh", "-c", "echo ran"}, {{"COLO_JOB_TOKEN", "short secret"}});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("COLO_JOB_TOKEN (its value is not shown) must be at least 32 printable characters"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("short secret"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

// Node 0 of several makes the token when none is given and says how the others get it; a later
// node refuses to start without it; --new-token makes one for all.
TEST(ColoRun, SeveralNodesShareOneToken) {
  Result r = run_colo({"--nnodes", "2", "--node-rank", "0", "--master-port", "29556", "sh", "-c",
                       "echo $COLO_JOB_TOKEN"},
                      {{"COLO_JOB_TOKEN", ""}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string token = r.out.substr(std::string("[rank 0] ").size(), 64);
  EXPECT_TRUE(is_hex_token(token)) << r.out;
  EXPECT_NE(r.err.find("start the colo-run of every other node with COLO_JOB_TOKEN=" + token), std::string::npos)
      << r.err;

  r = run_colo({"--nnodes", "2", "--node-rank", "1", "--master-port", "29556", "sh", "-c", "echo ran"},
               {{"COLO_JOB_TOKEN", ""}});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--node-rank 1 needs the job's token"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");

  Result first = run_colo({"--new-token"});
  Result second = run_colo({"--new-token"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_TRUE(is_hex_token(first.out.substr(0, first.out.size() - 1))) << first.out;
  EXPECT_EQ(first.out.back(), '\n');
  EXPECT_NE(first.out, second.out);
}

// ---- Which rank is the cause (issue 33, "Also") -------------------------------------------------

// A rank whose failure follows from a peer's (its colo left a note in COLO_RUN_REPORTS naming the
// peer it lost, as after "Connection closed by peer") is often the first to exit: the peer, the
// cause, takes longer. colo-run waits for the peer and names it, with its exit code.
TEST_F(ColoRunJob, ThePeerARankLostIsNamedWhenItFailsToo) {
  const std::string note = "\"$COLO_RUN_REPORTS/lost-peer.0\"";
  const std::string script =
      record_pids() + "if [ \"$RANK\" = 0 ]; then " + wait_for_ranks({1}) + "echo 1 > " + note +
      "; echo 'lost rank 1' >&2; exit 1; fi; while [ ! -e " + note +
      " ]; do sleep 0.02; done; echo 'error: cannot write the checkpoint' >&2; sleep 1; exit 3";
  Result r = run_colo({"--nproc-per-node", "2", "sh", "-c", script});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  const std::string pid1 = std::to_string(read_pid("pid.1"));
  const std::vector<std::string> lines = lines_of(r.err);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back(), "colo-run: rank 1 (pid " + pid1 +
                              ") exited with code 3 (rank 0 exited before it, having lost its connection to rank "
                              "1); stopped the other ranks")
      << r.err;
  EXPECT_NE(r.err.find("[rank 1] error: cannot write the checkpoint"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 10.0);
  expect_all_gone(2);
}

// The peer a rank lost exits cleanly, or not at all within colo-run's wait: the rank that failed
// is the cause after all.
TEST_F(ColoRunJob, ARankThatLostAPeerIsTheCauseWhenThePeerDoesNotFail) {
  const std::string note = "\"$COLO_RUN_REPORTS/lost-peer.0\"";
  auto script = [&](const std::string& peer_then) {
    return record_pids() + "if [ \"$RANK\" = 0 ]; then " + wait_for_ranks({1}) + "echo 1 > " + note +
           "; exit 1; fi; while [ ! -e " + note + " ]; do sleep 0.02; done; " + peer_then;
  };
  Result r = run_colo({"--nproc-per-node", "2", "sh", "-c", script("exit 0")});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  std::vector<std::string> lines = lines_of(r.err);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back().rfind("colo-run: rank 0 (pid " + std::to_string(read_pid("pid.0")) + ") exited with code 1",
                               0),
            0u)
      << r.err;
  EXPECT_LT(r.seconds, 10.0);

  r = run_colo({"--nproc-per-node", "2", "sh", "-c", script("wait")});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  lines = lines_of(r.err);
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines.back().find("rank 0 (pid "), std::string::npos) << r.err;
  EXPECT_GE(r.seconds, 4.5) << "colo-run waits for the peer a while";
  EXPECT_LT(r.seconds, 14.0);
}

// ---- A rank stopped by a signal ------------------------------------------------------------------

// Shell code that waits until the process whose pid is in file `name` is stopped (state T).
std::string wait_until_stopped(const std::string& dir, const std::string& name) {
  return "p=$(cat " + files::join(dir, name) + "); while ! grep -q '^[0-9]* (.*) T' /proc/$p/stat; do sleep 0.02; "
         "done; ";
}

// Rank 1 stops itself (SIGSTOP) and nothing fails: after the job's timeout (COLO_TIMEOUT_MS)
// colo-run names it as the cause, with 128 + SIGSTOP, and ends the job, rank 1 included.
TEST_F(ColoRunJob, ARankStoppedForTheTimeoutIsTheCause) {
  const std::string script = record_pids() + "if [ \"$RANK\" = 1 ]; then " + wait_for_ranks({0, 2}) +
                             "kill -STOP $$; echo continued >&2; exit 0; fi; wait";
  Result r = run_colo({"--nproc-per-node", "3", "sh", "-c", script}, {{"COLO_TIMEOUT_MS", "1500"}});
  EXPECT_EQ(r.exit_code, 128 + SIGSTOP) << r.err;
  const std::string pid1 = std::to_string(read_pid("pid.1"));
  const std::vector<std::string> lines = lines_of(r.err);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back().rfind("colo-run: rank 1 (pid " + pid1 + ") was stopped by signal 19 (SIGSTOP) 1.", 0), 0u)
      << r.err;
  EXPECT_NE(lines.back().find(" s ago and not continued; the job's timeout (COLO_TIMEOUT_MS) is 1500 ms; stopped the "
                              "other ranks"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("continued\n"), std::string::npos) << r.err;
  EXPECT_GE(r.seconds, 1.5);
  EXPECT_LT(r.seconds, kStoppedWithinS);
  expect_all_gone(3);
}

// Another rank fails while rank 1 is stopped (its collective timed out waiting, or NCCL's
// watchdog aborted it): the stopped rank is the cause, at once.
TEST_F(ColoRunJob, ARankFailingBesideAStoppedOneNamesTheStoppedOne) {
  const std::string script = record_pids() + "if [ \"$RANK\" = 1 ]; then " + wait_for_ranks({0}) +
                             "kill -STOP $$; exit 0; fi; " + wait_for_ranks({1}) +
                             wait_until_stopped(dir_, "pid.1") + "echo 'timed out' >&2; ulimit -c 0; kill -ABRT $$";
  Result r = run_colo({"--nproc-per-node", "2", "sh", "-c", script}, {{"COLO_TIMEOUT_MS", "60000"}});
  EXPECT_EQ(r.exit_code, 128 + SIGSTOP) << r.err;
  const std::vector<std::string> lines = lines_of(r.err);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back().rfind("colo-run: rank 1 (pid " + std::to_string(read_pid("pid.1")) +
                                   ") was stopped by signal 19 (SIGSTOP) ",
                               0),
            0u)
      << r.err;
  EXPECT_NE(lines.back().find(" s ago and not continued (rank 0 (pid " + std::to_string(read_pid("pid.0")) +
                              ") was killed by signal 6 (SIGABRT) meanwhile, waiting for it); stopped the other "
                              "ranks"),
            std::string::npos)
      << r.err;
  EXPECT_LT(r.seconds, kStoppedWithinS);
  expect_all_gone(2);
}

// A rank stopped for a while and continued is no cause, though it then runs past the timeout
// counted from its stop: the job ends as its ranks do.
TEST_F(ColoRunJob, ARankContinuedInTimeIsNoCause) {
  const std::string script = record_pids() + "if [ \"$RANK\" = 1 ]; then " + wait_for_ranks({0}) +
                             "kill -STOP $$; sleep 2; echo continued; exit 0; fi; " + wait_for_ranks({1}) +
                             wait_until_stopped(dir_, "pid.1") + "sleep 0.3; kill -CONT $p; exit 0";
  Result r = run_colo({"--nproc-per-node", "2", "sh", "-c", script}, {{"COLO_TIMEOUT_MS", "1500"}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("[rank 1] continued"), std::string::npos) << r.out;
  EXPECT_GE(r.seconds, 2.0);
  EXPECT_LT(r.seconds, kStoppedWithinS);
}

// colo-run reads COLO_TIMEOUT_MS as every rank does, and refuses a bad one before any rank starts.
TEST(ColoRun, ABadTimeoutIsRefusedBeforeTheRanksStart) {
  for (const char* bad : {"-5", "0", "10abc", "abc"}) {
    Result r = run_colo({"sh", "-c", "echo ran"}, {{"COLO_TIMEOUT_MS", bad}});
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.err;
    EXPECT_NE(r.err.find("environment variable COLO_TIMEOUT_MS"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("milliseconds from 1 to 604800000"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  }
}

}  // namespace
