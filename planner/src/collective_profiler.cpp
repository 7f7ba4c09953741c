// measure_collectives: latency and bus bandwidth of each collective over the ranks this job runs
// on, and how much of an all-reduce the computation beside it hides.
#include <colo/planner/collective_model.h>
#include <colo/planner/profiler.h>
#include <fmt/format.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "profiler_timing.h"

namespace colo::planner {
namespace {

using detail::median;
using detail::seconds_now;
using detail::synchronize;

// The slowest rank's value: a collective is as slow as its last member.
double max_over(dist::ProcessGroup& world, double x) {
  auto t = world.communicable(torch::full({1}, x, torch::dtype(torch::kFloat64)));
  world.all_reduce(t, dist::ReduceOp::kMax).wait();
  return t.cpu().item<double>();
}

// Matmuls on the device, standing in for a step's layers: run(k) does k and waits for them.
struct Matmuls {
  Matmuls(const c10::Device& device, int64_t n)
      : device(device),
        a(torch::randn({n, n}, torch::TensorOptions().device(device))),
        b(torch::randn({n, n}, torch::TensorOptions().device(device))) {
    torch::NoGradGuard no_grad;
    synchronize(device);
    const double start = seconds_now();
    int done = 0;
    while (seconds_now() - start < 0.05) {
      run(1);
      ++done;
    }
    one = (seconds_now() - start) / done;
  }
  void run(int k) const {
    torch::NoGradGuard no_grad;
    for (int i = 0; i < k; ++i) torch::mm(a, b);
    synchronize(device);
  }
  // How many take about `seconds`, alike on every rank (so that none waits for another's extra
  // work); 0 for 0 seconds, else at least 1.
  int count_for(dist::ProcessGroup& world, double seconds) const {
    if (seconds <= 0) return 0;
    return static_cast<int>(max_over(world, std::max(1.0, std::round(seconds / one))));
  }
  c10::Device device;
  torch::Tensor a, b;
  double one = 0;  // seconds per matmul, measured
};

// The times of `calls` calls of one `collective` of `bytes`, timed as a step meets them: back to
// back, `between` matmuls before each, no barrier between them (a rank that arrives first waits
// inside the call, as in a step). A barrier before each call instead, and a median, timed a
// state no step is in, and between CPU ranks picked one of Gloo's two modes.
std::vector<double> time_collective(dist::ProcessGroup& world, const c10::Device& device, Collective collective,
                                    int64_t bytes, int calls, const Matmuls& work, int between) {
  const int n = world.size();
  const auto options = torch::TensorOptions().dtype(torch::kFloat).device(device);
  const int64_t elements = std::max<int64_t>(bytes / 4 / n * n, n);
  auto full = torch::ones({elements}, options);
  auto part = torch::ones({elements / n}, options);
  auto issue = [&] {
    switch (collective) {
      case Collective::kAllReduce:
        world.all_reduce(full).wait();
        break;
      case Collective::kAllGather:
        world.all_gather(full, part).wait();
        break;
      case Collective::kReduceScatter:
        world.reduce_scatter(part, full).wait();
        break;
      case Collective::kBroadcast:
        world.broadcast(full, 0).wait();
        break;
      case Collective::kSendRecv: {
        // Pairs (0, 1), (2, 3), ...: the even rank sends, the odd one receives.
        const int peer = world.rank() ^ 1;
        if (peer < n) {
          if (world.rank() % 2 == 0) {
            world.send(full, peer).wait();
          } else {
            world.recv(full, peer).wait();
          }
        }
        break;
      }
    }
    synchronize(device);
  };
  world.barrier().wait();  // the burst starts together
  issue();                 // untimed: the buffers' first use
  std::vector<double> times;
  for (int r = 0; r < calls; ++r) {
    work.run(between);
    const double start = seconds_now();
    issue();
    times.push_back(seconds_now() - start);
  }
  return times;
}

double moved_bytes(Collective collective, double bytes, int n) {
  const double fraction = static_cast<double>(n - 1) / n;
  switch (collective) {
    case Collective::kAllReduce:
      return 2 * fraction * bytes;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
      return fraction * bytes;
    default:
      return bytes;
  }
}

// A matmul loop of about the all-reduce's time, and the share of an all-reduce it hides.
double overlap_efficiency(dist::ProcessGroup& world, const c10::Device& device, const Matmuls& work, int64_t bytes,
                          double comm_seconds) {
  auto buffer = torch::ones({bytes / 4}, torch::TensorOptions().device(device));
  const int iterations = work.count_for(world, comm_seconds);
  std::vector<double> alone, together;
  for (int r = 0; r < 4; ++r) {
    world.barrier().wait();
    double start = seconds_now();
    work.run(iterations);
    alone.push_back(seconds_now() - start);
    world.barrier().wait();
    start = seconds_now();
    auto all_reduce = world.all_reduce(buffer);
    work.run(iterations);
    all_reduce.wait();
    synchronize(device);
    together.push_back(seconds_now() - start);
  }
  const double compute = max_over(world, median(alone));
  const double both = max_over(world, median(together));
  const double hidden = compute + comm_seconds - both;
  return std::clamp(hidden / std::min(compute, comm_seconds), 0.0, 1.0);
}

// What an all-reduce costs beyond the fitted line when a rank waits on it right after computing:
// per size, `calls` rounds of (`between` matmuls, all-reduce) against the matmuls alone, timed
// whole (two chains of each, alternated), every rank's slowest; the mean over the sizes of the extra per call
// (detail::synchronous_extra_seconds). A call timed alone, as time_collective does, starts after
// the computation; what the computation's idle spell costs the collective's threads (waking
// Gloo's, between CPU ranks) or the collective costs the computation after it shows only here.
double synchronous_extra(dist::ProcessGroup& world, const c10::Device& device, const Matmuls& work, int between,
                         int calls, int64_t largest_bytes, const ClusterSpec& fitted,
                         const std::function<void(const std::string&)>& progress) {
  const int n = world.size();
  std::vector<double> extras;
  for (int64_t bytes = 16 << 10; bytes <= std::min<int64_t>(largest_bytes, 1 << 20); bytes *= 4) {
    auto buffer = torch::ones({std::max<int64_t>(bytes / 4, 1)}, torch::TensorOptions().device(device));
    world.all_reduce(buffer).wait();  // untimed: the buffer's first use
    auto chain = [&](bool with_collectives) {
      world.barrier().wait();
      const double start = seconds_now();
      for (int r = 0; r < calls; ++r) {
        work.run(between);
        if (with_collectives) {
          world.all_reduce(buffer).wait();
          synchronize(device);
        }
      }
      return max_over(world, seconds_now() - start);
    };
    // Two of each, alternated (alone, with, with, alone), so a drift of the machine during the
    // measurement falls on both sides of the difference alike.
    const double alone_first = chain(false);
    const double with = (chain(true) + chain(true)) / 2;
    const double alone = (alone_first + chain(false)) / 2;
    // The line as the step model prices it, so the two cannot drift apart.
    const double priced = collective_seconds(fitted, Collective::kAllReduce, static_cast<double>(bytes), {n, n});
    const double extra = detail::synchronous_extra_seconds(with, alone, calls, priced);
    extras.push_back(extra);
    if (progress) {
      progress(fmt::format("all_reduce {} bytes waited on after {:.1f} ms of matmuls: {:.3f} ms a call, the line "
                           "{:.3f} ms, extra {:.3f} ms",
                           bytes, work.one * between * 1e3, (with - alone) / calls * 1e3, priced * 1e3, extra * 1e3));
    }
  }
  double sum = 0;
  for (double e : extras) sum += e;
  return extras.empty() ? 0.0 : sum / static_cast<double>(extras.size());
}

}  // namespace

ClusterSpec measure_collectives(dist::ProcessGroup& world, const c10::Device& device,
                                const CollectiveProfileOptions& o,
                                const std::function<void(const std::string&)>& progress) {
  const int n = world.size();
  if (n < 2) throw std::invalid_argument("measuring collectives needs at least 2 ranks: start it under colo-run");
  ClusterSpec cluster;
  cluster.name = fmt::format("measured: {} {} rank{} of one node ({})", n, device.is_cuda() ? "GPU" : "CPU",
                             n == 1 ? "" : "s", world.backend() == dist::Backend::kNccl ? "NCCL" : "Gloo");
  cluster.source = "colo-plan profile --collectives";
  cluster.gpus_per_node = n;
  cluster.nics_per_node = n;
  cluster.device.is_gpu = device.is_cuda();
  if (o.repeats() < 1 || o.between_seconds() < 0 || o.synchronous_between_seconds() < 0) {
    throw std::invalid_argument(fmt::format("--calls {}, --between-ms {}, --synchronous-between-ms {}: give 1 or "
                                            "more calls per size and 0 or more milliseconds before each",
                                            o.repeats(), o.between_seconds() * 1e3,
                                            o.synchronous_between_seconds() * 1e3));
  }
  const Matmuls work(device, device.is_cuda() ? 4096 : 256);
  const int between = work.count_for(world, o.between_seconds());
  double comm_largest = 0;
  for (auto collective : all_collectives()) {
    std::vector<std::pair<double, double>> points;
    for (int64_t bytes = 4096; bytes <= o.largest_bytes(); bytes *= 4) {
      const auto times = time_collective(world, device, collective, bytes, o.repeats(), work, between);
      const double seconds = max_over(world, detail::call_seconds(times));
      const double middle = max_over(world, median(times));  // every rank takes part
      points.emplace_back(moved_bytes(collective, static_cast<double>(bytes), n), seconds);
      if (collective == Collective::kAllReduce) comm_largest = seconds;
      if (progress) {
        progress(fmt::format("{} {} bytes over {} ranks: {:.3f} ms a call (median {:.3f} ms, {} calls)",
                             to_string(collective), bytes, n, seconds * 1e3, middle * 1e3, times.size()));
      }
    }
    const auto [latency, per_byte] = detail::fit_line(points);
    cluster.intra_node.per_collective[collective] = {latency, 1.0 / per_byte};
  }
  cluster.intra_node.defaults = cluster.intra_node.per_collective[Collective::kAllReduce];
  cluster.inter_node = cluster.intra_node;
  int64_t largest = 4096;
  while (largest * 4 <= o.largest_bytes()) largest *= 4;
  cluster.overlap_efficiency = overlap_efficiency(world, device, work, largest, comm_largest);
  if (progress) progress(fmt::format("overlap efficiency: {:.2f}", cluster.overlap_efficiency));
  if (o.synchronous_between_seconds() > 0) {
    cluster.synchronous_extra_latency_s =
        synchronous_extra(world, device, work, work.count_for(world, o.synchronous_between_seconds()), o.repeats(),
                          o.largest_bytes(), cluster, progress);
    if (progress) {
      progress(fmt::format("synchronous extra latency: {:.3f} ms a call", cluster.synchronous_extra_latency_s * 1e3));
    }
  }
  if (o.memory_gib() > 0) {
    cluster.device.memory_gib = o.memory_gib();
  } else if (!device.is_cuda()) {
    const double bytes = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGE_SIZE));
    cluster.device.memory_gib = bytes / (1024.0 * 1024.0 * 1024.0) / n;
  }
  cluster.device.host_memory_gib = cluster.device.memory_gib * n;
  if (!device.is_cuda()) cluster.device.cores_per_node = static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  // The peak MFU is measured against: a matmul's rate here (fp32; bf16 too on a GPU).
  cluster.device.peak_tflops["fp32"] = max_over(world, measure_matmul_tflops(device, torch::kFloat));
  if (device.is_cuda()) cluster.device.peak_tflops["bf16"] = max_over(world, measure_matmul_tflops(device, torch::kBFloat16));
  cluster.device.host_device_GBps = device.is_cuda() ? 25.0 : 0.0;
  return cluster;
}

}  // namespace colo::planner
