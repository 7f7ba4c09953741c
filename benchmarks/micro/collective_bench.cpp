// all_reduce and all_gather through colo::dist::ProcessGroup on a world of one rank (Gloo on the
// CPU; NCCL on a GPU), rendezvous through a c10d FileStore. With one rank nothing crosses a link:
// this measures the fixed cost of colo's path (work handles, c10d dispatch, the backend's local
// copy) that every collective pays, not bandwidth. Multi-GPU bandwidth shows in colo_vit_bench.
#include "micro_bench.h"

#include <colo/dist/environment.h>
#include <colo/dist/process_group.h>

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <colo/files/files.h>
#include <map>
#include <memory>
#include <unistd.h>

namespace colo::bench {
namespace {

// One world per backend, created on first use and kept for the process (a FileStore world
// cannot be re-created on the same file while the first is alive).
std::shared_ptr<dist::ProcessGroup> world_of_one(dist::Backend backend) {
  static std::map<dist::Backend, std::shared_ptr<dist::ProcessGroup>> worlds;
  auto& world = worlds[backend];
  if (!world) {
    dist::Environment env;
    env.rdzv_file = files::join(files::temp_directory(), fmt::format("colo_micro_bench_{}_{}", ::getpid(),
                                                                    backend == dist::Backend::kNccl ? "nccl" : "gloo"));
    files::remove(env.rdzv_file);
    dist::ProcessGroup::Options options;
    options.backend = backend;
    options.timeout = std::chrono::seconds(60);
    world = dist::init_world(env, options);
  }
  return world;
}

enum class Collective { kAllReduce, kAllGather };

void run_collective(benchmark::State& state, const c10::Device& device, Collective collective) {
  auto world = world_of_one(device.is_cuda() ? dist::Backend::kNccl : dist::Backend::kGloo);
  const int64_t numel = state.range(0);
  const auto options = torch::TensorOptions().dtype(torch::kFloat).device(device);
  auto input = torch::ones({numel}, options);
  auto output = torch::empty({numel * world->size()}, options);
  for (auto _ : state) {
    if (collective == Collective::kAllReduce) {
      world->all_reduce(input).wait();
    } else {
      world->all_gather(output, input).wait();
    }
    sync(device);
  }
  // Only all_gather moves data on one rank (input into output); an all_reduce of one is a no-op
  // whose bytes/s would be meaningless.
  if (collective == Collective::kAllGather) {
    state.SetBytesProcessed(state.iterations() * numel * static_cast<int64_t>(sizeof(float)));
  }
}

}  // namespace

void register_collective_benchmarks(const std::vector<c10::Device>& devices) {
  for (const auto& device : devices) {
    const int64_t largest = device.is_cuda() ? (64 << 20) : (4 << 20);
    for (const auto& [name, collective] :
         {std::pair{"all_reduce", Collective::kAllReduce}, std::pair{"all_gather", Collective::kAllGather}}) {
      auto* b = benchmark::RegisterBenchmark(
          fmt::format("collective/{}/{}/world1", name, device_tag(device)).c_str(),
          [device, collective = collective](benchmark::State& state) { run_collective(state, device, collective); });
      b->RangeMultiplier(16)->Range(1 << 10, largest)->ArgNames({"numel"})->UseRealTime()->Unit(benchmark::kMicrosecond);
    }
  }
}

}  // namespace colo::bench
