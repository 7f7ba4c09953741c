// One step without a pipeline: torch_ddp, low_level_zero, gemini, and hybrid_parallel at pp 1
// without microbatches. What each overlaps (docs/architecture.md):
//   torch_ddp, zero 0    gradient buckets all-reduce during the last pass's backward
//   ZeRO-1 / ZeRO-2      buckets all-reduce / reduce-scatter during it; the updated weights are
//                        all-gathered during the next forward
//   gemini               each layer's chunks are gathered ahead of it in forward and backward,
//                        gradients reduce-scattered as they complete
// The part of each that the computation beside it cannot hide (its share overlap_efficiency),
// and never less than one bucket, stays on the step.
#include <colo/planner/collective_model.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "step_terms.h"

namespace colo::planner::detail {
namespace {

// What of `seconds` of communication `beside` seconds of computation leave on the step: the
// overlap hides its share (overlap_efficiency: of the communication, as the collective profiler
// measures it) of whichever is shorter. Computation longer than the communication hides that
// share, never all of it.
double unhidden(double seconds, double beside, double overlap) {
  return seconds - overlap * std::min(seconds, std::max(beside, 0.0));
}

// A bucketed collective overlapped with `beside` seconds of computation.
double exposed(const ClusterSpec& cluster, Collective collective, double bytes, double bucket_bytes,
               const GroupPlacement& group, double beside, double overlap) {
  if (group.size <= 1 || bytes <= 0) return 0.0;
  const double buckets = std::max(1.0, std::ceil(bytes / bucket_bytes));
  const double all = bucketed_seconds(cluster, collective, bytes, bucket_bytes, group);
  return std::max(all / buckets, unhidden(all, beside, overlap));
}

// The most chunks a rank of the plan gathers (RankMemory::chunks); 0 without a plan or chunks.
int64_t plan_chunks(const MemoryPlan* plan) {
  int64_t most = 0;
  if (plan) {
    for (const auto& rank : plan->ranks) most = std::max(most, rank.chunks);
  }
  return most;
}

}  // namespace

void fill_parameter_counts(const nn::ModelSummary& summary, StepModel::Caches& caches) {
  for (const auto& layer : summary.layers) {
    double split = 0, whole = 0;
    for (const auto& p : layer.parameters) {
      if (!p.trainable) continue;
      // The ViT policy's split: qkv and fc1 by output features (weight and bias), proj and fc2
      // by input features (weight only).
      const auto& n = p.name;
      const bool column = n.find("attn.qkv.") != std::string::npos || n.find("mlp.fc1.") != std::string::npos;
      const bool row = (n.find("attn.proj.weight") != std::string::npos || n.find("mlp.fc2.weight") != std::string::npos);
      (column || row ? split : whole) += static_cast<double>(p.numel);
    }
    caches.split_params.push_back(split);
    caches.whole_params.push_back(whole);
  }
}

double rank_parameters(const StepModel::Caches& caches, int begin, int end, int tp) {
  double total = 0;
  for (int l = begin; l < end && l < static_cast<int>(caches.whole_params.size()); ++l) {
    total += caches.whole_params[l] + caches.split_params[l] / tp;
  }
  return total;
}

double host_state_elements(const MemoryPlan* plan, int optimizer_states) {
  if (!plan) return 0.0;
  double most = 0;
  for (const auto& rank : plan->ranks) {
    double bytes = 0;
    for (const auto& part : rank.parts) {
      if (part.on_host && part.what.rfind("optimizer state", 0) == 0) bytes += static_cast<double>(part.bytes);
    }
    most = std::max(most, bytes);
  }
  return most / (4.0 * (2 + optimizer_states));
}

OptimizerTerms optimizer_terms(const PlanRequest& r, double elements, double host_elements, double element_bytes) {
  const auto& device = r.cluster.device;
  host_elements = std::min(host_elements, elements);
  const double on_device = elements - host_elements;
  OptimizerTerms t;
  const auto device_time = [&](double n) {
    return compute_slowdown(r.cluster, r.world_size) *
           (r.profile ? r.profile->device_optimizer.seconds(n) : n * device.device_adam_ns_per_element * 1e-9);
  };
  if (!device.is_gpu) {
    // CPU ranks: host and device are one memory; the CPU steps everything.
    t.optimizer = device_time(elements);
    return t;
  }
  const double host_time = r.profile && r.profile->host_optimizer ? r.profile->host_optimizer->seconds(host_elements)
                                                                 : host_elements * device.host_adam_ns_per_element * 1e-9;
  t.optimizer = device_time(on_device) + host_time;
  if (host_elements > 0) {
    const double to_device = r.profile && r.profile->host_to_device_GBps > 0 ? r.profile->host_to_device_GBps
                                                                            : device.host_device_GBps;
    const double to_host = r.profile && r.profile->device_to_host_GBps > 0 ? r.profile->device_to_host_GBps
                                                                          : device.host_device_GBps;
    // Gradients go down during backward (hidden like communication), updated weights come up
    // while the CPU steps the next chunk.
    const double down = host_elements * element_bytes / (to_host * 1e9);
    const double up = host_elements * element_bytes / (to_device * 1e9);
    t.offload = down * (1 - r.cluster.overlap_efficiency) + unhidden(up, host_time, r.cluster.overlap_efficiency);
  }
  return t;
}

Breakdown plain_step(const PlanRequest& r, const Layout& l, const LayerCosts& costs, const MemoryPlan* plan,
                     StepModel::Caches& caches) {
  const auto& cluster = r.cluster;
  const int passes = l.grad_accum;
  const int64_t samples = r.global_batch / (static_cast<int64_t>(l.dp) * passes);
  const auto pass = costs.range(0, costs.num_layers(), samples);
  Breakdown b;
  b.compute = passes * (pass.forward + pass.backward);
  b.recompute = passes * pass.recompute;
  b.tp_comm = passes * (pass.tp_forward + pass.tp_backward);

  const double eta = cluster.overlap_efficiency;
  const double params = rank_parameters(caches, 0, costs.num_layers(), l.tp);
  const double bytes = params * costs.element_bytes();
  const auto dp = dp_group(l.dp, 1, l.tp, cluster.gpus_per_node);
  const double backward = pass.backward + pass.tp_backward;
  const double forward = pass.forward + pass.tp_forward;
  double elements = params;
  if (l.plugin == "gemini" || l.zero_stage == 3) {
    // gemini, and hybrid_parallel's zero_stage 3 without a pipeline (its one pass goes layer by
    // layer): every pass gathers each chunk for its forward and again for its backward; the gradients
    // are reduce-scattered once per step (kept whole under accumulation until the last pass). One
    // collective per chunk (the memory plan's count; a 25 MiB bucket's worth where it has none):
    // where a collective's fixed cost is large (Gloo: ~0.7-1 ms) the chunk count decides it. Each
    // pass's first gathers (forward and backward) and the last reduce-scatter have nothing to hide
    // behind.
    const int64_t planned = plan_chunks(plan);
    const double chunks = std::max(1.0, planned > 0 ? static_cast<double>(planned) : std::ceil(bytes / kBucketBytes));
    const double gather = collective_seconds(cluster, Collective::kAllGather, bytes / chunks, dp);
    const double scatter = collective_seconds(cluster, Collective::kReduceScatter, bytes / chunks, dp);
    const double all = chunks * (2.0 * passes * gather + scatter);
    b.dp_comm = dp.size > 1 ? std::max(2.0 * passes * gather + scatter, unhidden(all, b.compute, eta)) : 0.0;
    elements = std::ceil(params / l.dp);
  } else if (l.zero_stage == 0) {
    b.dp_comm = exposed(cluster, Collective::kAllReduce, bytes, kBucketBytes, dp, backward, eta);
  } else {
    const auto reduce = l.zero_stage == 1 ? Collective::kAllReduce : Collective::kReduceScatter;
    b.dp_comm = exposed(cluster, reduce, bytes, kBucketBytes, dp, backward, eta) +
                exposed(cluster, Collective::kAllGather, bytes, kBucketBytes, dp, forward, eta);
    elements = std::ceil(params / l.dp);
  }
  if (r.profile && (l.plugin == "gemini" || l.plugin == "low_level_zero")) {
    // Measured on one rank against torch_ddp (measure_plugin_overheads); the rank's chunks and
    // flat buffers cover every parameter it holds whole. Priced once a step: it was measured at one
    // pass a step, and what accumulation's extra passes add is not measured.
    if (const auto* po = r.profile->overhead(plugin_overhead_key(l.plugin, l.zero_stage))) {
      b.plugin_work = po->per_element_s * params;
    }
  }
  const double host = l.cpu_offload ? elements : host_state_elements(plan, r.optimizer_states);
  const auto opt = optimizer_terms(r, elements, host, costs.element_bytes());
  b.optimizer = opt.optimizer;
  b.offload = opt.offload;
  return b;
}

}  // namespace colo::planner::detail
