// colo-run's command line: its own options, then the program and the program's arguments.
#include <fmt/format.h>

#include <boost/program_options.hpp>
#include <climits>
#include <cmath>
#include <sstream>

#include "launcher.h"

namespace colo::launcher {
namespace {

namespace po = boost::program_options;

po::options_description launcher_options() {
  po::options_description desc("Options");
  // clang-format off
  desc.add_options()
      ("help,h", "print this help and exit")
      ("nproc-per-node", po::value<int>()->value_name("N"), "ranks to start on this node (default 1)")
      ("nnodes", po::value<int>()->value_name("M"), "nodes in the job (default 1)")
      ("node-rank", po::value<int>()->value_name("R"), "this node's index in [0, M) (default 0)")
      ("master-addr", po::value<std::string>()->value_name("ADDR"),
       "address of rank 0's store (default 127.0.0.1); several nodes: an address of node 0 the "
       "others reach")
      ("master-port", po::value<int>()->value_name("PORT"),
       "port of rank 0's store (default: a free port; required with --nnodes > 1)")
      ("control-port", po::value<int>()->value_name("PORT"),
       "with --nnodes > 1 and --max-restarts: the port at --master-addr where node 0's colo-run "
       "meets the other nodes' colo-run to agree on each restart (default --master-port + 1; the "
       "same on every node)")
      ("rdzv-file", po::value<std::string>()->value_name("PATH|auto|none"),
       "ranks rendezvous through a c10d FileStore at PATH (must not exist; removed at the end), "
       "or at a fresh temporary path with 'auto' (the default on one node: no port is opened); "
       "'none': through a TCP store served by rank 0 at --master-addr:--master-port. One node "
       "only. Exported as COLO_RDZV_FILE")
      ("new-token", "print a fresh job token (for COLO_JOB_TOKEN) and exit")
      ("grace-period", po::value<double>()->value_name("SECONDS"),
       "when stopping the ranks, wait this long after SIGTERM before SIGKILL (default 5)")
      ("max-restarts", po::value<int>()->value_name("N"),
       "when a rank fails (non-zero exit, signal, a collective's timeout), stop every rank and start "
       "the whole job again, up to N times (default 0), with a fresh rendezvous and job token each "
       "time; the ranks see the attempt as COLO_RESTART_COUNT (0 first). Several nodes restart together "
       "(see --control-port)")
      ("elastic", po::value<std::string>()->value_name("MIN:MAX"),
       "elastic data parallelism (with --max-restarts): start MAX ranks; a restart leaves out the "
       "slots whose rank could not start (a GPU that failed the start-up probe) and tries smaller "
       "worlds while the program cannot use one, never fewer than MIN ranks. The program keeps its "
       "global batch (COLO_ELASTIC_MAX_WORLD says the world it was planned for). On several nodes "
       "(the same --elastic on each) node 0 chooses each attempt's world and a node that is lost is "
       "left out")
      ("no-prefix", "pass the ranks' output through without the '[rank R] ' prefix")
      ("check", "instead of a program, start N copies of colo-run that verify their environment");
  // clang-format on
  return desc;
}

// --elastic MIN:MAX: 1 <= MIN <= MAX; MAX ranks are started (an --nproc-per-node must say the same).
void parse_elastic(const std::string& text, bool nproc_given, LaunchConfig& config, std::vector<std::string>& problems) {
  const auto colon = text.find(':');
  auto whole = [](const std::string& part, int* value) {
    if (part.empty() || part.size() > 9 || part.find_first_not_of("0123456789") != std::string::npos) return false;
    *value = std::stoi(part);
    return true;
  };
  int min = 0, max = 0;
  if (colon == std::string::npos || !whole(text.substr(0, colon), &min) || !whole(text.substr(colon + 1), &max) ||
      min < 1 || min > max) {
    problems.push_back(fmt::format(
        "--elastic '{}': the form is MIN:MAX, whole numbers with 1 <= MIN <= MAX (ranks per node: at most MAX are "
        "started, never fewer than MIN), e.g. --elastic 2:4",
        text));
    return;
  }
  if (nproc_given && config.nproc_per_node != max) {
    problems.push_back(fmt::format("--nproc-per-node {} and --elastic {}: an elastic job starts MAX ranks; drop "
                                   "--nproc-per-node or make it {}",
                                   config.nproc_per_node, text, max));
    return;
  }
  config.elastic_min = min;
  config.elastic_max = max;
  config.nproc_per_node = max;
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

}  // namespace

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
  if (vm.count("new-token")) {
    config.new_token = true;
    return config;
  }
  if (vm.count("nproc-per-node")) config.nproc_per_node = vm["nproc-per-node"].as<int>();
  if (vm.count("nnodes")) config.nnodes = vm["nnodes"].as<int>();
  if (vm.count("node-rank")) config.node_rank = vm["node-rank"].as<int>();
  if (vm.count("master-addr")) config.master_addr = vm["master-addr"].as<std::string>();
  if (vm.count("rdzv-file")) config.rdzv_file = vm["rdzv-file"].as<std::string>();
  if (vm.count("grace-period")) config.grace_period_s = vm["grace-period"].as<double>();
  if (vm.count("max-restarts")) config.max_restarts = vm["max-restarts"].as<int>();
  config.prefix_output = vm.count("no-prefix") == 0;
  config.self_check = vm.count("check") != 0;

  // Every violated rule at once, so a long command line is fixed in one go.
  std::vector<std::string> problems;
  if (vm.count("elastic")) parse_elastic(vm["elastic"].as<std::string>(), vm.count("nproc-per-node") != 0, config, problems);
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
      problems.push_back("--rdzv-file needs a path, 'auto' or 'none'");
    } else if (config.rdzv_file == "none") {
      config.rdzv_file.clear();
    } else if (config.nnodes > 1) {
      problems.push_back(
          "--rdzv-file works on one node only (the ranks share a local file); "
          "with --nnodes > 1 drop it and use --master-addr/--master-port");
    }
  } else if (config.nnodes == 1) {
    // One node: a store file in a fresh private directory, not a TCP store that would listen on
    // every interface of the machine (LibTorch 1.13's binds no single address).
    config.rdzv_file = "auto";
  }
  if (config.max_restarts < 0 || config.max_restarts > kMaxRestarts) {
    problems.push_back(fmt::format("--max-restarts must be in 0..{} (got {})", kMaxRestarts, config.max_restarts));
  }
  const bool linked = config.max_restarts > 0 && config.nnodes > 1;
  if (vm.count("control-port")) {
    const int port = vm["control-port"].as<int>();
    if (!linked) {
      problems.push_back("--control-port is for a job of several nodes that may restart (--nnodes > 1 with "
                         "--max-restarts N); drop it");
    } else if (port < 1 || port > 65535) {
      problems.push_back(fmt::format("--control-port must be in 1..65535 (got {})", port));
    } else if (port == config.master_port) {
      problems.push_back(fmt::format("--control-port {} is --master-port's too: rank 0's store listens there; pick "
                                     "another port, the same on every node",
                                     port));
    } else {
      config.control_port = port;
    }
  } else if (linked && config.master_port > 0) {
    if (config.master_port == 65535) {
      problems.push_back("--master-port 65535 leaves no port above it for node 0's colo-run: give --control-port");
    } else {
      config.control_port = config.master_port + 1;
    }
  }
  if (config.elastic_max > 0 && config.max_restarts == 0) {
    problems.push_back("--elastic changes the world only when the job starts again: add --max-restarts N (N >= 1)");
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
  if (!problems.empty()) throw UsageError(fmt::format("{}", fmt::join(problems, "; ")));
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
          "A rank held stopped by a signal (SIGSTOP) for the job's timeout (COLO_TIMEOUT_MS,\n"
          "milliseconds, checked before the ranks start; 5 minutes when unset), or while another\n"
          "rank fails, is named as the cause and the job is stopped (exit 147, 128 + SIGSTOP).\n"
          "With --max-restarts N a failed job (a rank's failure or timeout, not colo-run's own\n"
          "interruption) is started again, up to N times: each restart gets a fresh store file or\n"
          "port and a job token derived for that attempt, so that no rank left from an earlier\n"
          "attempt can join; COLO_RESTART_COUNT says which attempt a rank is in. When the restarts\n"
          "are spent, colo-run says so and exits with the last failure's status. On several nodes\n"
          "the nodes' colo-run agree through node 0's at --master-addr:--control-port (default\n"
          "--master-port + 1; each proves it holds COLO_JOB_TOKEN): a failure on any node stops\n"
          "every node's ranks, and every node starts again together or ends with that failure's\n"
          "status; a node whose colo-run goes away or stops answering is named and ends the job.\n"
          "With --elastic MIN:MAX as well, a restart may start fewer ranks: a slot whose rank\n"
          "could not start (its GPU failed the start-up probe) is left out for good, its GPUs\n"
          "renumbered through CUDA_VISIBLE_DEVICES, and while the program cannot use a world (it\n"
          "says so: its pipeline and tensor parallelism do not divide it, or its global batch\n"
          "does not split) the next smaller one is tried; each attempt counts as a restart, and\n"
          "below MIN ranks the job stops. COLO_ELASTIC_MAX_WORLD tells the ranks the world the\n"
          "run was planned for (train_vit keeps the global batch by accumulating more). On\n"
          "several nodes (give each the same --elastic) node 0's colo-run chooses each attempt's\n"
          "world: the nodes in order with their live slots, global ranks numbered across them; a\n"
          "node whose colo-run is lost, that stops answering or that can start fewer than MIN\n"
          "ranks is left out and the job restarts without it (node 0 cannot be: its rank 0 serves\n"
          "the store); a world the program refuses loses ranks from the last nodes first.\n"
          "Warns when the ranks outnumber the cores (or the GPUs) available. Options end at "
          "PROGRAM.\n\n"
          "Who may join: on one node the ranks meet through a store file in a fresh directory\n"
          "only this user can open (--rdzv-file auto, the default), and colo's Gloo groups listen\n"
          "on 127.0.0.1: nothing of the job is reachable from another machine. Several nodes:\n"
          "rank 0 serves a TCP store at --master-addr:--master-port, on that address alone with\n"
          "LibTorch 2.x, on every interface with LibTorch 1.13 (its TCPStore cannot be bound;\n"
          "rank 0 says so). Every rank must hold the job token, COLO_JOB_TOKEN: colo-run passes\n"
          "it to its ranks, makes one on node 0 when it is not set (and prints it when other\n"
          "nodes need it), and requires it on the other nodes ('colo-run --new-token' makes one\n"
          "to give every node). A rank proves it holds the token before it is admitted and signs\n"
          "what it writes into the store; a process without it cannot take a rank's place (rank 0\n"
          "logs the attempt), and no rank acts on a value it did not sign. The token is not\n"
          "encryption: whoever reaches the store can still read it, and can disrupt the job (it\n"
          "then fails, saying so); NCCL's and Gloo's own connections carry no token.\n\n"
       << launcher_options();
  return text.str();
}

}  // namespace colo::launcher
