#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

// colo-run: starts the ranks of one node with the environment torchrun sets, prefixes their
// output, and stops the whole job when any rank fails. Linux only (process groups, signalfd,
// PR_SET_PDEATHSIG). The logic lives here rather than in main.cpp so that parsing and the rank
// environment can be reasoned about (and tested through the binary) on their own. One file per
// job: command_line.cpp (parse_args, usage), job.cpp (the supervisor), job_setup.cpp (each attempt,
// --max-restarts), node_link.cpp (several nodes agreeing on each restart), elastic_slots.cpp (--elastic's slots), self_check.cpp (--check,
// check_rank_main), launcher.cpp (run, make_rank_env, pick_free_port); file helpers come from
// colo::files (colo/files/files.h), which libcolo_core shares.
namespace colo::launcher {

// Bad command line. main() prints the message and exits with status 2, the shell's convention
// for usage errors, so scripts can tell "wrong invocation" from "a rank failed".
class UsageError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct LaunchConfig {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  // 0 until resolved: run() picks a free port on a single node; many nodes must agree on one,
  // so parse_args() requires --master-port there.
  int master_port = 0;
  // --control-port: where node 0's colo-run listens for the other nodes' colo-run when a job of
  // several nodes may restart (--max-restarts with --nnodes > 1; node_link.h). 0 otherwise; parse_args
  // makes it master_port + 1 when not given.
  int control_port = 0;
  // "" (none: rank 0 serves a TCP store at master_addr:master_port), "auto" (run() creates a fresh
  // path and removes it afterwards) or a path. parse_args() makes "auto" the default on one node.
  std::string rdzv_file;
  // COLO_JOB_TOKEN for the ranks: resolved by run() (job_token.h) when empty.
  std::string job_token;
  // COLO_RUN_REPORTS for the ranks: a directory of colo-run's where a rank that fails because it
  // lost a peer leaves a note naming the peer (run() makes a fresh one).
  std::string run_reports;
  // The job's timeout (COLO_TIMEOUT_MS in colo-run's environment, which the ranks inherit; else
  // colo's default): a rank stopped by a signal (SIGSTOP) for that long is the job's cause, and
  // the job is stopped. Resolved by run().
  long long timeout_ms = 0;
  double grace_period_s = 5.0;  // SIGTERM -> SIGKILL delay when stopping the ranks
  // --max-restarts: how often a failed job is started again; restart_count: the attempt being
  // started (0 first), exported as COLO_RESTART_COUNT.
  int max_restarts = 0;
  int restart_count = 0;
  // --elastic MIN:MAX (0:0 when not elastic): nproc_per_node is the attempt's rank count, at most
  // MAX. elastic_devices: the GPUs the attempt's local ranks use, in order, exported as
  // CUDA_VISIBLE_DEVICES once a slot has been left out (empty: the node's own numbering).
  int elastic_min = 0;
  int elastic_max = 0;
  std::vector<std::string> elastic_devices;
  // This node's first global rank and the job's world, where node 0's colo-run assigns them per
  // attempt (--elastic with --nnodes > 1: nodes may run different numbers of ranks, or none).
  // -1 and 0: node_rank * nproc_per_node and nnodes * nproc_per_node (first_rank_of, world_size_of).
  int first_rank = -1;
  int world_size = 0;
  bool prefix_output = true;
  bool self_check = false;  // --check: run the launcher's own self-check instead of a program
  bool show_help = false;
  bool new_token = false;   // --new-token: print a fresh job token and exit
  std::vector<std::string> command;  // the program and its arguments, passed through untouched
};

// This node's first global rank and the job's world size (see LaunchConfig::first_rank).
inline int first_rank_of(const LaunchConfig& config) {
  return config.first_rank >= 0 ? config.first_rank : config.node_rank * config.nproc_per_node;
}
inline int world_size_of(const LaunchConfig& config) {
  return config.world_size > 0 ? config.world_size : config.nnodes * config.nproc_per_node;
}

// The status colo's programs (and colo-run) exit with for a bad command line or environment: a
// job that failed with it is not restarted (the same command would fail again).
inline constexpr int kUsageErrorStatus = 2;

// The most --max-restarts takes: a job that fails this often needs a person, not a loop.
inline constexpr int kMaxRestarts = 10000;

using EnvVars = std::vector<std::pair<std::string, std::string>>;

// Parses the arguments after argv[0]. Options end at the first token that is not an option or
// an option's value (or after "--"): everything from there on is the program and its own
// arguments, so `colo-run --nproc-per-node 2 prog --nproc-per-node 9` passes the second flag to
// prog. Throws UsageError naming the bad option and what to change.
LaunchConfig parse_args(const std::vector<std::string>& args);

// The --help text.
std::string usage();

// The variables colo-run sets for local rank `local_rank` (RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT, COLO_LAUNCHER, COLO_RESTART_COUNT and, where resolved,
// COLO_RDZV_FILE, COLO_JOB_TOKEN and COLO_RUN_REPORTS; COLO_RUN_PREFIXES_OUTPUT=1 unless --no-prefix;
// under --elastic COLO_ELASTIC_MAX_WORLD and,
// once a slot is left out, CUDA_VISIBLE_DEVICES). `config` must be resolved (master_port
// set, rdzv_file not "auto"); throws std::invalid_argument otherwise.
EnvVars make_rank_env(const LaunchConfig& config, int local_rank);

// What a rank's environment holds: colo-run's own `environ` without the variables colo-run owns
// (an inherited RANK or COLO_JOB_TOKEN from a nested launch or a stale export), then
// make_rank_env's, as "NAME=value".
std::vector<std::string> rank_environment(const LaunchConfig& config, int local_rank, char** environ_entries);

// What a rank gets for PyTorch's NCCL watchdog unless colo-run's environment sets any of these
// (then none is added: the user's flight-recorder setup stands). A collective that times out
// otherwise waits TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC (60 s) for a dump before the rank aborts,
// even with the flight recorder off: a hung rank was caught 15 s in and the job ended 75 s in.
// colo-run names the hung rank itself; the dump is one export away (TORCH_NCCL_DUMP_ON_TIMEOUT=1).
inline constexpr std::pair<const char*, const char*> kNcclWatchdogDefaults[] = {
    {"TORCH_NCCL_DUMP_ON_TIMEOUT", "0"}, {"TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC", "1000"}};
// Setting this one (the flight recorder's size) also leaves the defaults out.
inline constexpr const char* kNcclTraceBufferVariable = "TORCH_NCCL_TRACE_BUFFER_SIZE";

// The global rank that rank `rank` noted it lost before it failed: the note the ranks' colo
// (core/src/dist/wait_failure.h, lost_peer_note_path) leaves in config.run_reports. nullopt when
// there is none, or when it is older than kLostPeerNoteLifetimeS (from a failure the program
// caught and survived).
inline constexpr long kLostPeerNoteLifetimeS = 30;
// The peer a rank's recent note names, or kUnknownPeer where the rank lost a connection whose
// peer it could not name (Gloo reported an address no member had published).
inline constexpr int kUnknownPeer = -1;
std::optional<int> lost_peer_of(const std::string& run_reports, int rank);

// A port that was free on `addr` a moment ago (bind to port 0, read it back, close). Another
// process may take it before rank 0 binds it; on one node --rdzv-file avoids ports altogether.
int pick_free_port(const std::string& addr);

// Runs the job described by `config` (or the self-check with config.self_check) and returns
// colo-run's exit status: 0 when every rank exits 0; the first failing rank's exit code, or
// 128 + signal when it was killed; 128 + signal when colo-run was interrupted (130 for SIGINT);
// 141 (128 + SIGPIPE) when the reader of colo-run's output went away while the ranks still had
// output to forward (it stops them, as the closed pipe would without colo-run in between); 127
// when the program cannot be executed.
int run(LaunchConfig config);

// The hidden child mode of --check: the first argument main() looks for, and the function a
// self-check rank runs. It verifies the variables colo-run set and the process properties the
// launcher relies on, and returns 0 when all hold.
inline constexpr const char* kCheckRankFlag = "--internal-check-rank";
int check_rank_main(const std::string& check_dir);

}  // namespace colo::launcher
