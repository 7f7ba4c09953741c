// Whole jobs watched from outside: which sockets a one-node job listens on, who is admitted to a
// job of two "nodes" (two colo-run on this machine, over loopback), and how a rank that died or
// failed first is named, with colo-run and without. The job is colo_job_probe
// (tests/dist/job_probe.cpp), started as separate processes.
#include <colo/files/files.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "command_output.h"

extern char** environ;

namespace {

namespace files = colo::files;
using Clock = std::chrono::steady_clock;
using command_output::free_port;

const std::string kColoRun = COLO_BINARY_DIR "/bin/colo-run";
const std::string kProbe = COLO_BINARY_DIR "/bin/colo_job_probe";
// 64 hexadecimal digits, as colo-run makes them.
const std::string kToken = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The launcher variables of a surrounding job (a test run under colo-run) must not reach the
// processes a test starts: each is given exactly the variables its scenario sets.
bool inherited(const std::string& entry) {
  static const std::set<std::string> dropped = {
      "RANK",        "LOCAL_RANK",     "WORLD_SIZE",     "LOCAL_WORLD_SIZE", "GROUP_RANK",
      "MASTER_ADDR", "MASTER_PORT",    "COLO_LAUNCHER",  "COLO_RDZV_FILE",   "COLO_JOB_TOKEN",
      "COLO_RUN_REPORTS", "COLO_TIMEOUT_MS", "TORCHELASTIC_RUN_ID"};
  return dropped.count(entry.substr(0, entry.find('='))) == 0;
}

// A process with its stdout and stderr in files of `dir`, named `name`.out / `name`.err.
class Process {
 public:
  Process(const std::string& dir, const std::string& name, std::vector<std::string> argv,
          const std::map<std::string, std::string>& env)
      : out_path_(files::join(dir, name + ".out")), err_path_(files::join(dir, name + ".err")) {
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      if (inherited(*e)) env_strings.emplace_back(*e);
    }
    env_strings.push_back("OMP_NUM_THREADS=1");
    for (const auto& [key, value] : env) env_strings.push_back(key + "=" + value);
    std::vector<char*> args, envp;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    start_ = Clock::now();
    pid_ = ::fork();
    if (pid_ == 0) {
      const int out = ::open(out_path_.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
      const int err = ::open(err_path_.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
      ::dup2(out, STDOUT_FILENO);
      ::dup2(err, STDERR_FILENO);
      ::execve(args[0], args.data(), envp.data());
      ::_exit(126);
    }
  }
  ~Process() {
    if (!reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  // The exit code (-1 when killed by a signal); past `timeout_s` the process is killed and the
  // test fails.
  int wait(double timeout_s = 60) {
    const auto deadline = start_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        ADD_FAILURE() << "pid " << pid_ << " did not finish within " << timeout_s << " s; killing it\n" << err();
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    reaped_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::string out() const { return read_file(out_path_); }
  std::string err() const { return read_file(err_path_); }

 private:
  std::string out_path_, err_path_;
  pid_t pid_ = -1;
  bool reaped_ = false;
  Clock::time_point start_;
};

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string last_line(const std::string& text) {
  std::string line, last;
  std::istringstream in(text);
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  return last;
}

class DistJob : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!files::exists(kProbe)) GTEST_SKIP() << kProbe << " is not built";
    std::string pattern = files::join(files::temp_directory(), "colo-dist-job-XXXXXX");
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    if (!dir_.empty()) files::remove_all(dir_);
  }
  std::string dir_;
};

// ---- Listening sockets ------------------------------------------------------------------------

// The socket inodes a process holds open ("socket:[N]" links in /proc/PID/fd).
std::set<std::string> socket_inodes(const std::string& pid) {
  std::set<std::string> inodes;
  const std::string fd_dir = "/proc/" + pid + "/fd";
  for (const auto& name : files::list_directory(fd_dir)) {
    char target[256] = {};
    const ssize_t n = ::readlink(files::join(fd_dir, name).c_str(), target, sizeof target - 1);
    const std::string link(target, n > 0 ? static_cast<std::size_t>(n) : 0);
    if (link.rfind("socket:[", 0) == 0) inodes.insert(link.substr(8, link.size() - 9));
  }
  return inodes;
}

// Whether /proc/net/tcp's hexadecimal local address ("0100007F:9C40", or tcp6's 32 digits) is a
// loopback one: 127.0.0.0/8, ::1, or ::ffff:127.x.
bool loopback_address(const std::string& local) {
  const std::string host = local.substr(0, local.find(':'));
  if (host.size() == 8) return host.substr(6, 2) == "7F";  // little-endian: the first octet last
  if (host == "00000000000000000000000001000000") return true;
  return host.substr(0, 24) == "0000000000000000FFFF0000" && host.substr(30, 2) == "7F";
}

// A job of two ranks on one node, as colo-run starts it by default, uses no address other than
// loopback: its store is a file, its Gloo pairs listen on 127.0.0.1. Read from /proc/net/tcp and
// tcp6 while the job holds, for the sockets the ranks themselves hold, in any state: LibTorch
// 1.13's Gloo closes each pair's listening socket once the pair is connected, and a connection's
// local address is the one its side listened on or reached the peer from.
TEST_F(DistJob, OneNodeJobListensOnLoopbackOnly) {
  Process job(dir_, "job", {kColoRun, "--nproc-per-node", "2", kProbe, "hold", dir_}, {{"COLO_TIMEOUT_MS", "30000"}});
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (!(files::exists(files::join(dir_, "ready.0")) && files::exists(files::join(dir_, "ready.1"))) &&
         Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::set<std::string> inodes;
  for (const char* ready : {"ready.0", "ready.1"}) {
    std::string pid;
    std::ifstream(files::join(dir_, ready)) >> pid;
    ASSERT_FALSE(pid.empty()) << "the job's ranks did not start:\n" << job.err();
    for (const auto& inode : socket_inodes(pid)) inodes.insert(inode);
  }
  int held = 0;
  std::vector<std::string> exposed;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
      if (inodes.count(inode) == 0) continue;
      ++held;
      if (!loopback_address(local)) exposed.push_back(std::string(table) + " " + local + " state " + state);
    }
  }
  std::ofstream(files::join(dir_, "release")) << "done\n";
  EXPECT_EQ(job.wait(), 0) << job.err();
  EXPECT_GT(held, 0) << "no TCP socket of the job's ranks was found: the test looked in the wrong place";
  EXPECT_TRUE(exposed.empty()) << "sockets beyond loopback: " << ::testing::PrintToString(exposed);
}

// ---- The job token ----------------------------------------------------------------------------

// Two colo-run on this machine form a job of two "nodes" over loopback, with a job token. Before
// node 1 starts, two processes try to take rank 1: one without a token, one with another token.
// Neither is admitted: rank 0 logs each refusal, the first fails at once saying the job needs its
// token, the second at its (short) timeout saying its attempts were refused; then the true rank 1
// joins and the job runs as usual.
TEST_F(DistJob, AProcessWithoutTheTokenCannotTakeARank) {
  const std::string port = std::to_string(free_port());
  const std::vector<std::string> node = {kColoRun, "--nnodes", "2", "--nproc-per-node", "1",
                                         "--master-addr", "127.0.0.1", "--master-port", port};
  auto node_args = [&](int node_rank) {
    std::vector<std::string> args = node;
    args.insert(args.begin() + 1, {"--node-rank", std::to_string(node_rank)});
    args.insert(args.end(), {kProbe, "join"});
    return args;
  };
  Process node0(dir_, "node0", node_args(0), {{"COLO_JOB_TOKEN", kToken}, {"COLO_TIMEOUT_MS", "60000"}});
  const std::map<std::string, std::string> rank1 = {{"RANK", "1"},          {"WORLD_SIZE", "2"},
                                                    {"LOCAL_RANK", "0"},    {"LOCAL_WORLD_SIZE", "1"},
                                                    {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}};
  auto with = [&](std::map<std::string, std::string> extra) {
    extra.insert(rank1.begin(), rank1.end());
    return extra;
  };
  Process tokenless(dir_, "tokenless", {kProbe, "join"}, with({{"COLO_TIMEOUT_MS", "30000"}}));
  EXPECT_EQ(tokenless.wait(), 1) << tokenless.out() << tokenless.err();
  EXPECT_NE(tokenless.err().find("this job admits only processes that hold its job token (COLO_JOB_TOKEN), and this "
                                 "one has none"),
            std::string::npos)
      << tokenless.err();
  EXPECT_EQ(tokenless.out().find("admitted"), std::string::npos) << tokenless.out();

  const std::string other_token(64, 'f');
  Process impostor(dir_, "impostor", {kProbe, "join"},
                   with({{"COLO_TIMEOUT_MS", "3000"}, {"COLO_JOB_TOKEN", other_token}}));
  EXPECT_EQ(impostor.wait(), 1) << impostor.out() << impostor.err();
  EXPECT_NE(impostor.err().find("rank 1: rendezvous timed out after 3000 ms: rank(s) 0 never arrived"),
            std::string::npos)
      << impostor.err();
  EXPECT_NE(impostor.err().find("were refused"), std::string::npos) << impostor.err();

  Process node1(dir_, "node1", node_args(1), {{"COLO_JOB_TOKEN", kToken}, {"COLO_TIMEOUT_MS", "60000"}});
  EXPECT_EQ(node1.wait(), 0) << node1.err();
  EXPECT_EQ(node0.wait(), 0) << node0.err();
  EXPECT_NE(node0.out().find("[rank 0] rank 0 admitted; all_reduce ok"), std::string::npos) << node0.out();
  EXPECT_NE(node1.out().find("[rank 1] rank 1 admitted; all_reduce ok"), std::string::npos) << node1.out();
  const std::string log = node0.err();
  EXPECT_NE(log.find("colo: rank 0: refused a process that asked to join this job as rank 1: it has no job token; "
                     "it said it is pid "),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("colo: rank 0: refused a process that asked to join this job as rank 1: its job token is not "
                     "this job's"),
            std::string::npos)
      << log;
}

// A later node's colo-run without the token refuses to start, saying where the token comes from.
TEST_F(DistJob, ALaterNodeNeedsTheToken) {
  Process node1(dir_, "node1",
                {kColoRun, "--nnodes", "2", "--node-rank", "1", "--master-port", "29999", kProbe, "join"}, {});
  EXPECT_EQ(node1.wait(), 2);
  EXPECT_NE(node1.err().find("--node-rank 1 needs the job's token: set COLO_JOB_TOKEN"), std::string::npos)
      << node1.err();
  EXPECT_EQ(node1.out(), "");
}

// ---- Naming the rank that went away -------------------------------------------------------------

// Launched by hand (torchrun's variables, no colo-run): when rank 1 is killed, rank 0's error
// names rank 1, not only an address and a port.
TEST_F(DistJob, WithoutColoRunTheSurvivorNamesTheRankThatDied) {
  const std::string port = std::to_string(free_port());
  auto rank = [&](int r) {
    return std::map<std::string, std::string>{{"RANK", std::to_string(r)}, {"WORLD_SIZE", "2"},
                                              {"LOCAL_RANK", std::to_string(r)}, {"LOCAL_WORLD_SIZE", "2"},
                                              {"MASTER_ADDR", "127.0.0.1"},       {"MASTER_PORT", port},
                                              {"COLO_TIMEOUT_MS", "30000"}};
  };
  Process rank0(dir_, "rank0", {kProbe, "die"}, rank(0));
  Process rank1(dir_, "rank1", {kProbe, "die"}, rank(1));
  EXPECT_EQ(rank1.wait(), -1) << "rank 1 kills itself";
  EXPECT_EQ(rank0.wait(), 1) << rank0.err();
  const std::string err = rank0.err();
  EXPECT_NE(err.find("all_reduce on group world (gloo, global ranks 0,1) failed"), std::string::npos) << err;
  // (The address Gloo gives is rank 1's published one only where rank 0 made the connection; the
  // rank is named either way.)
  EXPECT_NE(err.find("the connection to rank 1 (global 1) went away"), std::string::npos) << err;
}

// Rank 1 fails (a checkpoint error, say), closes its groups and takes a while to exit; the
// others' all-reduce fails at once ("Connection closed by peer") and one of them exits first.
// colo-run's last line names rank 1, the cause, with its exit code, not the rank that lost it;
// at 2, 4 and 8 ranks.
class DistJobLostPeer : public DistJob, public ::testing::WithParamInterface<int> {};

TEST_P(DistJobLostPeer, ColoRunNamesTheRankThatFailedFirstNotTheOneThatLostIt) {
  const int ranks = GetParam();
  Process job(dir_, "job", {kColoRun, "--nproc-per-node", std::to_string(ranks), kProbe, "lose-peer"},
              {{"COLO_TIMEOUT_MS", "30000"}});
  EXPECT_EQ(job.wait(90), 3) << job.err();
  const std::string err = job.err();
  EXPECT_NE(err.find("[rank 1] rank 1: error: cannot write the checkpoint (simulated)"), std::string::npos) << err;
  // With two ranks the survivor's only peer is rank 1. With more, a survivor can lose another
  // survivor that exited first (a chain colo-run follows), or see its lost connection at an
  // address no member published (its note then says "a peer"): colo-run still names rank 1.
  if (ranks == 2) {
    EXPECT_NE(err.find("the connection to rank 1 (global 1) went away"), std::string::npos) << err;
    EXPECT_NE(last_line(err).find(" exited before it, having lost its connection to rank 1)"), std::string::npos)
        << err;
  }
  EXPECT_EQ(last_line(err).rfind("colo-run: rank 1 (pid ", 0), 0u) << err;
  EXPECT_NE(last_line(err).find("exited with code 3 (rank "), std::string::npos) << err;
  EXPECT_NE(last_line(err).find(" exited before it, having lost its connection to "), std::string::npos) << err;
}

INSTANTIATE_TEST_SUITE_P(Ranks, DistJobLostPeer, ::testing::Values(2, 4, 8));

// ---- A rank that is stopped, not dead ------------------------------------------------------------

// Rank 1 stops itself (SIGSTOP) while the others wait for it in an all-reduce, at 2, 4 and 8
// ranks. Its peers time out (Gloo) or are aborted by NCCL's watchdog and so fail first; colo-run's
// last line must name rank 1, stopped, within the job's timeout (COLO_TIMEOUT_MS) and a margin,
// and the job must end, rank 1 included.
class DistJobStopped : public DistJob, public ::testing::WithParamInterface<int> {};

TEST_P(DistJobStopped, ColoRunNamesTheStoppedRank) {
  const int ranks = GetParam();
  const auto start = Clock::now();
  Process job(dir_, "job", {kColoRun, "--nproc-per-node", std::to_string(ranks), kProbe, "stop"},
              {{"COLO_TIMEOUT_MS", "4000"}});
  const int code = job.wait(90);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const std::string err = job.err();
  EXPECT_EQ(code, 128 + SIGSTOP) << err;
  EXPECT_EQ(last_line(err).rfind("colo-run: rank 1 (pid ", 0), 0u) << err;
  EXPECT_NE(last_line(err).find("was stopped by signal 19 (SIGSTOP)"), std::string::npos) << err;
  EXPECT_EQ(err.find("rank 1: continued"), std::string::npos) << "rank 1 was killed, not let go on: " << err;
  // Starting 8 LibTorch processes on 2 cores takes a few seconds; the timeout is 4.
  EXPECT_LT(seconds, 40.0) << err;
}

INSTANTIATE_TEST_SUITE_P(Ranks, DistJobStopped, ::testing::Values(2, 4, 8));

// ---- Several nodes restarting together (--max-restarts with --nnodes > 1) -----------------------

// Two colo-run as nodes 0 and 1 of one job over loopback, with --max-restarts `restarts`; each
// node's rank runs `script` (sh -c). COLO_TIMEOUT_MS 30 s unless `timeout_ms` says otherwise.
struct TwoNodes {
  std::string port = std::to_string(free_port());
  std::string control = std::to_string(free_port());
  std::vector<std::string> node_args(int node, int restarts, const std::string& script,
                                     const std::string& elastic = "") const {
    std::vector<std::string> args = {kColoRun, "--nnodes", "2", "--node-rank", std::to_string(node), "--max-restarts",
                                     std::to_string(restarts), "--master-addr", "127.0.0.1", "--master-port", port,
                                     "--control-port", control, "--grace-period", "1"};
    if (!elastic.empty()) args.insert(args.end(), {"--elastic", elastic});
    args.insert(args.end(), {"sh", "-c", script});
    return args;
  }
  static std::map<std::string, std::string> env(const std::string& token = kToken, const std::string& timeout_ms = "30000") {
    return {{"COLO_JOB_TOKEN", token}, {"COLO_TIMEOUT_MS", timeout_ms}};
  }
};

// Node 1's rank fails in the first attempt while node 0's would sleep a minute: node 0's colo-run
// stops its rank at once (it is told, not left to time out), both nodes start attempt 1 together
// with the same derived token, and both end well.
TEST_F(DistJob, TwoNodesRestartTogetherWhenARankOfOneFails) {
  const TwoNodes nodes;
  const std::string script =
      "echo \"node $GROUP_RANK attempt $COLO_RESTART_COUNT token $(echo $COLO_JOB_TOKEN | cksum | cut -d' ' -f1)\"; "
      "if [ $COLO_RESTART_COUNT = 0 ]; then if [ $GROUP_RANK = 1 ]; then exit 3; fi; sleep 60; fi";
  Process node0(dir_, "node0", nodes.node_args(0, 1, script), TwoNodes::env());
  Process node1(dir_, "node1", nodes.node_args(1, 1, script), TwoNodes::env());
  EXPECT_EQ(node1.wait(40), 0) << node1.err();
  EXPECT_EQ(node0.wait(40), 0) << "node 0's first attempt sleeps 60 s: it must be stopped, not waited for\n"
                                << node0.err();
  std::map<std::string, std::set<std::string>> tokens;  // attempt -> the tokens the two nodes saw
  for (Process* node : {&node0, &node1}) {
    for (const auto& line : lines_of(node->out())) {
      std::istringstream fields(line);
      std::string tag, rank, word, node_rank, attempt_word, attempt, token_word, token;
      fields >> tag >> rank >> word >> node_rank >> attempt_word >> attempt >> token_word >> token;
      tokens[attempt].insert(token);
    }
  }
  ASSERT_EQ(tokens.size(), 2u) << node0.out() << node1.out();
  EXPECT_EQ(tokens["0"].size(), 1u) << "one token per attempt on every node";
  EXPECT_EQ(tokens["1"].size(), 1u) << "one token per attempt on every node";
  EXPECT_NE(*tokens["0"].begin(), *tokens["1"].begin()) << "each attempt has a token of its own";
  EXPECT_NE(node0.out().find("[rank 0] node 0 attempt 1"), std::string::npos) << node0.out();
  EXPECT_NE(node1.out().find("[rank 1] node 1 attempt 1"), std::string::npos) << node1.out();
  EXPECT_NE(node0.err().find("colo-run: node 1: rank 1 (pid "), std::string::npos) << node0.err();
  EXPECT_NE(node0.err().find("exited with code 3; stopping this node's ranks"), std::string::npos) << node0.err();
  for (Process* node : {&node0, &node1}) {
    EXPECT_NE(node->err().find("colo-run: restart 1 of 1 (COLO_RESTART_COUNT=1): starting this node's ranks again, "
                               "with every node's, after "),
              std::string::npos)
        << node->err();
    EXPECT_NE(node->err().find("because node 1: rank 1 (pid "), std::string::npos) << node->err();
  }
}

// Node 1's rank fails in every attempt: after the one restart (the boundary) every node ends with
// the failure's status and says the restarts are spent.
TEST_F(DistJob, WhenTheRestartsAreSpentEveryNodeEndsWithTheFailuresStatus) {
  const TwoNodes nodes;
  const std::string script = "echo \"attempt $COLO_RESTART_COUNT\"; if [ $GROUP_RANK = 1 ]; then exit 3; fi; sleep 60";
  Process node0(dir_, "node0", nodes.node_args(0, 1, script), TwoNodes::env());
  Process node1(dir_, "node1", nodes.node_args(1, 1, script), TwoNodes::env());
  EXPECT_EQ(node1.wait(40), 3) << node1.err();
  EXPECT_EQ(node0.wait(40), 3) << node0.err();
  EXPECT_NE(node1.out().find("[rank 1] attempt 1"), std::string::npos) << node1.out();
  EXPECT_EQ(node1.out().find("attempt 2"), std::string::npos) << node1.out();
  for (Process* node : {&node0, &node1}) {
    EXPECT_NE(node->err().find("the job failed and its restarts are spent (--max-restarts 1: 2 attempts in all); the "
                               "last failure: node 1: rank 1 (pid "),
              std::string::npos)
        << node->err();
  }
}

// Node 1's colo-run is killed (its rank kills it) while node 0's rank sleeps: node 0 names the
// node it lost, stops its rank and ends the job at once, without a restart.
TEST_F(DistJob, ANodeWhoseColoRunDiesIsNamedAndEndsTheJob) {
  const TwoNodes nodes;
  const std::string script = "if [ $GROUP_RANK = 1 ]; then kill -9 $PPID; fi; sleep 60";
  Process node0(dir_, "node0", nodes.node_args(0, 3, script), TwoNodes::env());
  Process node1(dir_, "node1", nodes.node_args(1, 3, script), TwoNodes::env());
  EXPECT_EQ(node1.wait(40), -1) << "node 1's colo-run is killed";
  EXPECT_EQ(node0.wait(40), 1) << node0.err();
  const std::string err = node0.err();
  EXPECT_NE(err.find("colo-run: lost node 1's colo-run (its connection closed); the job cannot go on without that "
                     "node; stopping this node's ranks"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("lost the colo-run of node(s) 1; the job cannot restart without every node"), std::string::npos)
      << err;
  EXPECT_EQ(err.find("restart 1"), std::string::npos) << err;
}

// A colo-run with another token that says it is node 1 is refused, and refuses node 0 in turn;
// node 0 then names the node that never came, at the job's timeout.
TEST_F(DistJob, ANodeWithoutTheTokenIsRefusedAndAMissingNodeIsNamed) {
  const TwoNodes nodes;
  Process node0(dir_, "node0", nodes.node_args(0, 1, "true"), TwoNodes::env(kToken, "4000"));
  Process impostor(dir_, "impostor", nodes.node_args(1, 1, "true"), TwoNodes::env(std::string(64, 'f'), "4000"));
  EXPECT_EQ(impostor.wait(30), 1) << impostor.err();
  EXPECT_NE(impostor.err().find("colo-run: what answered at 127.0.0.1:" + nodes.control +
                                " did not prove it holds this job's token"),
            std::string::npos)
      << impostor.err();
  EXPECT_EQ(impostor.out(), "");
  EXPECT_EQ(node0.wait(30), 1) << node0.err();
  const std::string err = node0.err();
  EXPECT_NE(err.find("colo-run: refused a colo-run from 127.0.0.1 that says it is node 1: it did not prove it holds "
                     "this job's token (COLO_JOB_TOKEN)"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("colo-run: node(s) 1 did not connect to node 0's colo-run at 127.0.0.1:" + nodes.control +
                     " within the job's timeout (4000 ms, COLO_TIMEOUT_MS)"),
            std::string::npos)
      << err;
  EXPECT_EQ(node0.out(), "") << "no rank starts while a node is missing";
}

// ---- Several elastic nodes (--elastic with --nnodes > 1) -------------------------------------------

// What each rank says first: its attempt, global rank and world, local rank and node size, GPUs.
const std::string kSayShare =
    "echo \"attempt $COLO_RESTART_COUNT rank $RANK/$WORLD_SIZE local $LOCAL_RANK/$LOCAL_WORLD_SIZE node $GROUP_RANK "
    "devices ${CUDA_VISIBLE_DEVICES-none} planned $COLO_ELASTIC_MAX_WORLD\"; ";

// Node 0 numbers the ranks across the nodes and chooses each attempt's world: node 1's local rank
// 0 cannot start (its slot, GPU 4, is left out: attempt 1 is node 0's 2 ranks and node 1's one, on
// GPU 5); the program refuses a world of 3 (every rank's note, a usage error's status), so attempt
// 2 takes the rank off the last node: node 1 sits it out, and both nodes end well.
TEST_F(DistJob, ElasticNodesShareTheWorldNode0ChoosesAndTheLastNodeGivesUpRanksFirst) {
  const TwoNodes nodes;
  // A rank fails only once the attempt's other ranks have spoken (files they leave), so that none
  // is stopped before it does.
  const std::string spoke = files::join(dir_, "spoke.");
  const std::string script =
      kSayShare + "touch " + spoke + "$COLO_RESTART_COUNT.$RANK; " +
      "wait_for() { i=0; while [ $i -lt 300 ]; do ok=1; for r in \"$@\"; do [ -f " + spoke +
      "$COLO_RESTART_COUNT.$r ] || ok=0; done; [ $ok = 1 ] && return; sleep 0.1; i=$((i+1)); done; }; "
      "if [ $COLO_RESTART_COUNT = 0 ]; then "
      "  if [ $RANK = 2 ]; then wait_for 0 1 3; echo 'GPU 4 is gone' >$COLO_RUN_REPORTS/cannot-start.2; exit 3; fi; "
      "  sleep 60; fi; "
      "if [ $WORLD_SIZE = 3 ]; then wait_for 0 1 2; echo 'dp does not divide 3' >$COLO_RUN_REPORTS/world-size-unusable.$RANK; "
      "exit 2; fi; "
      "sleep 0.2";
  auto env = TwoNodes::env();
  env["CUDA_VISIBLE_DEVICES"] = "4,5";
  Process node0(dir_, "node0", nodes.node_args(0, 3, script, "1:2"), env);
  Process node1(dir_, "node1", nodes.node_args(1, 3, script, "1:2"), env);
  EXPECT_EQ(node0.wait(50), 0) << node0.err();
  EXPECT_EQ(node1.wait(50), 0) << node1.err();
  const std::string out0 = node0.out(), out1 = node1.out(), err0 = node0.err(), err1 = node1.err();
  // Attempt 0: every slot, ranks numbered node by node.
  EXPECT_CONTAINS(out0, "[rank 1] attempt 0 rank 1/4 local 1/2 node 0 devices 4,5 planned 4");
  EXPECT_CONTAINS(out1, "[rank 3] attempt 0 rank 3/4 local 1/2 node 1 devices 4,5 planned 4");
  EXPECT_CONTAINS(err1, "colo-run: elastic: leaving out slot 0 (GPU 4) from now on: local rank 0 could not start: "
                        "GPU 4 is gone");
  // Attempt 1: node 1's one live slot is global rank 2, on GPU 5.
  EXPECT_CONTAINS(err0, "colo-run: elastic: attempt 1 runs 3 ranks: node 0 2, node 1 1");
  EXPECT_CONTAINS(out1, "[rank 2] attempt 1 rank 2/3 local 0/1 node 1 devices 5 planned 4");
  EXPECT_CONTAINS(err1, "colo-run: restart 1 of 3 (COLO_RESTART_COUNT=1): starting this node's ranks again, with every "
                        "node's, after ");
  EXPECT_CONTAINS(err1, "; this node runs rank 2 of 3");
  // Attempt 2: the refused world of 3 loses the last node's rank.
  EXPECT_CONTAINS(err0, "colo-run: elastic: the program cannot run on 3 ranks");
  EXPECT_CONTAINS(err0, "colo-run: elastic: attempt 2 runs 2 ranks: node 0 2, node 1 0");
  EXPECT_CONTAINS(err0, "; this node runs ranks 0-1 of 2");
  EXPECT_CONTAINS(err1, "; this node sits it out (a world of 2)");
  EXPECT_CONTAINS(out0, "[rank 1] attempt 2 rank 1/2 local 1/2 node 0 devices 4,5 planned 4");
  EXPECT_LACKS(out1, "attempt 2");
  EXPECT_LACKS(err0 + err1, "restart 3");
}

// Node 1's colo-run is killed (its rank kills it): under --elastic node 0 names the node, stops its
// own ranks at once and starts the job again without it; a node that can start fewer than MIN ranks
// is left out and told so (it ends with status 0: the job goes on without it).
TEST_F(DistJob, ElasticNodesGoOnWithoutANodeThatIsLostOrCannotStartMin) {
  {
    const TwoNodes nodes;
    const std::string script =
        kSayShare + "if [ $COLO_RESTART_COUNT = 0 ]; then if [ $RANK = 2 ]; then kill -9 $PPID; fi; sleep 60; fi";
    Process node0(dir_, "node0", nodes.node_args(0, 2, script, "1:2"), TwoNodes::env());
    Process node1(dir_, "node1", nodes.node_args(1, 2, script, "1:2"), TwoNodes::env());
    EXPECT_EQ(node1.wait(40), -1) << "node 1's colo-run is killed";
    EXPECT_EQ(node0.wait(40), 0) << node0.err();
    const std::string err = node0.err();
    EXPECT_CONTAINS(err, "colo-run: lost node 1's colo-run (its connection closed); --elastic restarts the job without "
                         "that node; stopping this node's ranks");
    EXPECT_CONTAINS(err, "colo-run: elastic: attempt 1 runs 2 ranks: node 0 2");
    EXPECT_CONTAINS(node0.out(), "[rank 1] attempt 1 rank 1/2 local 1/2 node 0");
    EXPECT_LACKS(err, "restart 2");
  }
  {
    const TwoNodes nodes;
    const std::string script =
        kSayShare +
        "if [ $COLO_RESTART_COUNT = 0 ]; then if [ $RANK = 3 ]; then echo dead >$COLO_RUN_REPORTS/cannot-start.3; "
        "exit 3; fi; sleep 60; fi";
    Process node0(dir_, "min0", nodes.node_args(0, 2, script, "2:2"), TwoNodes::env());
    Process node1(dir_, "min1", nodes.node_args(1, 2, script, "2:2"), TwoNodes::env());
    EXPECT_EQ(node1.wait(40), 0) << node1.err();
    EXPECT_EQ(node0.wait(40), 0) << node0.err();
    const std::string left = "elastic: leaving out node 1 from now on: it can start only 1 of its slots, fewer than "
                             "--elastic's MIN 2";
    EXPECT_CONTAINS(node0.err(), "colo-run: " + left);
    EXPECT_CONTAINS(node1.err(), left);
    EXPECT_CONTAINS(node0.out(), "[rank 0] attempt 1 rank 0/2 local 0/2 node 0");
    EXPECT_LACKS(node1.out(), "attempt 1");
  }
}

}  // namespace
