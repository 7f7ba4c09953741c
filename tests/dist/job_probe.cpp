// colo_job_probe: a minimal colo job for tests that watch a whole job from outside (its sockets,
// its admission, how its failures are reported): tests/unit/dist_job_test.cpp starts it under
// colo-run or by hand. Every scenario first joins the world (init_world from the environment,
// COLO_TIMEOUT_MS or 30 s) and all-reduces once.
//
//   colo_job_probe join          prints "rank R admitted; all_reduce ok" and exits 0
//   colo_job_probe hold DIR      then writes DIR/ready.R (its pid), waits (60 s at most) for
//                                DIR/release, all-reduces again and exits 0
//   colo_job_probe die           rank 1 kills itself (SIGKILL) while the others all-reduce; they
//                                print their error and exit 1
//   colo_job_probe lose-peer     rank 1 fails as from a checkpoint error: it prints its reason,
//                                closes the world (its peers' all-reduce fails at once), takes
//                                1.5 s to exit (as a LibTorch process may) and exits 3; the
//                                others print their error and exit 1
//   colo_job_probe stop          rank 1 stops itself (SIGSTOP) while the others all-reduce: they
//                                wait for it until their timeout
#include <colo/dist/environment.h>
#include <colo/dist/process_group.h>

#include <fmt/format.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

namespace {

using colo::dist::ProcessGroup;

int run(const std::string& scenario, const std::string& dir) {
  const auto env = colo::dist::Environment::from_env();
  ProcessGroup::Options options;
  options.timeout = colo::dist::timeout_from_env(std::chrono::seconds(30));
  options.backend = colo::dist::Backend::kGloo;
  auto world = colo::dist::init_world(env, options);
  auto ones = torch::ones({4});
  world->all_reduce(ones).wait();
  if (ones[0].item<float>() != static_cast<float>(world->size())) {
    std::fprintf(stderr, "rank %d: all_reduce gave %f\n", env.rank, ones[0].item<float>());
    return 1;
  }
  if (scenario == "join") {
    std::printf("rank %d admitted; all_reduce ok\n", env.rank);
    return 0;
  }
  if (scenario == "hold") {
    const std::string ready = fmt::format("{}/ready.{}", dir, env.rank);
    std::ofstream(ready + ".tmp") << ::getpid() << "\n";
    std::rename((ready + ".tmp").c_str(), ready.c_str());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!std::ifstream(dir + "/release") && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    world->all_reduce(ones).wait();
    return 0;
  }
  if (scenario == "die" && env.rank == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the others are waiting by now
    std::raise(SIGKILL);
  }
  if (scenario == "stop" && env.rank == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::raise(SIGSTOP);
    std::fprintf(stderr, "rank 1: continued\n");
    return 5;
  }
  if (scenario == "lose-peer" && env.rank == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::fprintf(stderr, "rank 1: error: cannot write the checkpoint (simulated)\n");
    world->close();
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    return 3;
  }
  world->all_reduce(ones).wait();  // fails: rank 1 went away (or stopped)
  std::fprintf(stderr, "rank %d: all_reduce returned without rank 1\n", env.rank);
  return 4;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  if (scenario != "join" && scenario != "hold" && scenario != "die" && scenario != "lose-peer" &&
      scenario != "stop") {
    std::fprintf(stderr, "usage: colo_job_probe join|hold DIR|die|lose-peer|stop\n");
    return 2;
  }
  torch::set_num_threads(1);
  try {
    return run(scenario, argc > 2 ? argv[2] : ".");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "colo_job_probe: error: %s\n", e.what());
    return 1;
  }
}
