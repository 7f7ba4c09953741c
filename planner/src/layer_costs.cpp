#include "layer_costs.h"

#include <colo/planner/collective_model.h>

#include <algorithm>
#include <cmath>
#include <utility>

namespace colo::planner::detail {
namespace {

double element_bytes_of(const std::string& precision) { return precision == "fp32" ? 4.0 : 2.0; }

}  // namespace

LayerCosts::LayerCosts(const PlanRequest& request, const Layout& layout)
    : request_(request),
      layout_(layout),
      depth_(static_cast<int>(request.model.vit.depth())),
      element_(element_bytes_of(request.precision)),
      use_profile_(request.profile.has_value()) {}

// The analytic model: matrix products at the cluster's sustained rate, the memory-bound rest
// (norms, GELU, residual adds, the attention's q/k/v traffic) at its sustained bandwidth, and a
// fixed cost per layer pass. A backward is two forwards' products and memory traffic.
LayerTimes LayerCosts::analytic(const std::string& layer, int64_t samples) const {
  const auto& c = request_.model.vit;
  const auto& device = request_.cluster.device;
  auto peak = device.peak_tflops.find(request_.precision == "fp8" ? "fp8" : request_.precision);
  if (peak == device.peak_tflops.end()) peak = device.peak_tflops.find("bf16");
  const double flops_per_s = (peak == device.peak_tflops.end() ? 100.0 : peak->second) * 1e12 * device.matmul_efficiency;
  const double bytes_per_s = device.memory_bandwidth_GBps * 1e9 * device.memory_efficiency;
  const double overhead = device.layer_overhead_us * 1e-6;
  const int tp = layout_.tp;
  const double b = static_cast<double>(samples);
  const double t = static_cast<double>(c.num_tokens());
  const double d = static_cast<double>(c.embed_dim());
  const double m = static_cast<double>(c.mlp_hidden_dim());
  double flops = 0, bytes = 0, weight_share = 0.5;
  if (layer == "patch_embedding") {
    flops = patch_embedding_flops(c, samples);
    bytes = element_ * b * (static_cast<double>(c.in_channels() * c.image_size() * c.image_size()) + 3 * t * d);
    weight_share = 1.0;  // its input needs no gradient
  } else if (layer == "encoder_block") {
    flops = encoder_block_flops(c, samples, tp);
    // Replicated over tp (unless sequence parallel): two norms, two residual adds (~10 passes
    // over the tokens); split: q, k, v and the attention output, GELU over the hidden units.
    // (the grid modes split them too: every activation is a block.)
    const double replicated = 10 * b * t * d / (splits_activations() ? tp : 1);
    const double split = (6 * b * t * d + 3 * b * t * m) / tp;
    bytes = element_ * (replicated + split);
  } else {
    flops = head_flops(c, samples);
    bytes = element_ * 3 * b * t * d;
  }
  LayerTimes times;
  times.samples = samples;
  const double product = flops / flops_per_s;
  const double traffic = bytes / bytes_per_s;
  times.forward = product + traffic + overhead;
  times.backward = 2 * product + 2 * traffic + overhead;
  times.weight_grad = weight_share * 2 * product + 0.5 * overhead;
  times.input_grad = std::max(times.backward - times.weight_grad, 0.5 * overhead);
  times.checkpointed_forward = times.forward;
  times.checkpointed_backward = times.forward + times.backward;
  return times;
}

LayerTimes LayerCosts::times(const std::string& layer, int64_t samples) const {
  // The patch embedding and the head are not split by tensor parallelism: their tp=1 costs.
  const bool block = layer == "encoder_block";
  auto t = use_profile_ ? request_.profile->at(layer, block ? layout_.tp : 1, block && layout_.sequence_parallel, samples)
                        : analytic(layer, samples);
  // Measured (or modelled) for a rank with a core of its own; CPU ranks that outnumber the
  // cores share them.
  const double slowdown = compute_slowdown(request_.cluster, request_.world_size);
  for (double* v : {&t.forward, &t.backward, &t.input_grad, &t.weight_grad, &t.checkpointed_forward,
                    &t.checkpointed_backward}) {
    *v *= slowdown;
  }
  return t;
}

double LayerCosts::boundary_bytes(int64_t samples) const {
  const auto& c = request_.model.vit;
  const double tokens = static_cast<double>(c.num_tokens());
  // Sequence parallelism and the grid modes pass this rank's share of the activation between stages.
  const double share = splits_activations() ? 1.0 / layout_.tp : 1.0;
  return element_ * static_cast<double>(samples) * tokens * static_cast<double>(c.embed_dim()) * share;
}

// 2D tensor parallelism's collectives for one block, from docs/tensor_parallel_modes.md (checked
// against the code by tests/dist/tp_traffic_test.cpp): per Linear2D(in, out) q broadcasts of the
// input block (T·in/q²) along the row and q of the weight block (out·in/q²) down the column each
// way, backward also the reduce-scatters of the stacked dX (T·in/q) and dW (out·in/q) terms and
// the bias gradient's all-reduce (out/q); per LayerNorm2D two all-reduces of T/q statistics along
// the row each way and, backward, the weight and bias gradients (h/q) down the column. The row and
// column groups are q ranks of one node (tp never spans nodes).
LayerCosts::GridComm LayerCosts::grid_2d_comm(int64_t samples, int side) const {
  const auto& c = request_.model.vit;
  const auto& cluster = request_.cluster;
  const double q = side;
  const auto line = tp_group(side, cluster.gpus_per_node);
  const double e = element_;
  const double T = static_cast<double>(samples) * static_cast<double>(c.num_tokens());
  const double h = static_cast<double>(c.embed_dim());
  const double m = static_cast<double>(c.mlp_hidden_dim());
  auto seconds = [&](Collective what, double bytes) { return synchronous_seconds(cluster, what, bytes, line); };
  GridComm g;
  const std::pair<double, double> linears[] = {{h, 3 * h}, {h, h}, {h, m}, {m, h}};
  for (const auto& [in, out] : linears) {
    const double broadcasts = q * (seconds(Collective::kBroadcast, T * in / (q * q) * e) +
                                   seconds(Collective::kBroadcast, out * in / (q * q) * e));
    g.block_forward += broadcasts;
    g.block_backward += broadcasts + seconds(Collective::kReduceScatter, T * in / q * e) +
                        seconds(Collective::kReduceScatter, out * in / q * e) +
                        seconds(Collective::kAllReduce, out / q * e);
  }
  const double statistics = 2 * seconds(Collective::kAllReduce, T / q * e);
  g.block_forward += 2 * statistics;
  g.block_backward += 2 * (statistics + 2 * seconds(Collective::kAllReduce, h / q * e));
  // gather_2d before the head (split_2d's backward after the embedding): the features along the
  // row, then the batch down the column.
  g.edge = seconds(Collective::kAllGather, T * h / q * e) + seconds(Collective::kAllGather, T * h * e);
  return g;
}

bool LayerCosts::splits_activations() const { return layout_.sequence_parallel || layout_.tp_mode != "1d"; }

// 2.5D (docs/tensor_parallel_modes.md's "2.5D"): each layer of the d runs 2D's collectives on its
// samples / d, and the depth group (d ranks) all-reduces every parameter gradient: per linear the
// weight block (out·in/q²) and the bias block (out/q), per LayerNorm the weight and the bias
// (h/q). The edges add the layers' shares gathered over the depth group ([T, h]).
LayerCosts::GridComm LayerCosts::grid_25d_comm(int64_t samples) const {
  const auto& c = request_.model.vit;
  const auto& cluster = request_.cluster;
  const int d = layout_.tp_depth;
  const int side = static_cast<int>(std::lround(std::sqrt(static_cast<double>(layout_.tp / d))));
  auto g = grid_2d_comm(samples / d, side);
  const auto depth = tp_group(d, cluster.gpus_per_node);
  const double q = side, e = element_;
  const double T = static_cast<double>(samples) * static_cast<double>(c.num_tokens());
  const double h = static_cast<double>(c.embed_dim());
  const double m = static_cast<double>(c.mlp_hidden_dim());
  auto sum = [&](double elements) { return synchronous_seconds(cluster, Collective::kAllReduce, elements * e, depth); };
  const std::pair<double, double> linears[] = {{h, 3 * h}, {h, h}, {h, m}, {m, h}};
  for (const auto& [in, out] : linears) g.block_backward += sum(out * in / (q * q)) + sum(out / q);
  g.block_backward += 2 * 2 * sum(h / q);
  g.edge += synchronous_seconds(cluster, Collective::kAllGather, T * h * e, depth);
  return g;
}

// 3D tensor parallelism's collectives for one block, from docs/tensor_parallel_modes.md's "3D"
// (checked against the code by tests/dist/tp_traffic_test.cpp), T the microbatch's tokens. Per
// Linear3D(in, out), forward: the input [T/q, in/q] gathered over a line of q, the weight block
// [out/q, in/q] over j, the product [T/q, out/q] reduce-scattered over a line; backward: dY
// gathered, the weight and the input gathered again, dX and dW reduce-scattered, and the bias
// [out/q] over a plane of q² (qkv's and fc1's all-reduced; proj's and fc2's gathered forward and
// reduce-scattered back). Per LayerNorm3D two all-reduces of T/q² statistics each way and its
// weight and bias [h/q] gathered over the plane (reduce-scattered back).
LayerCosts::GridComm LayerCosts::grid_3d_comm(int64_t samples) const {
  const auto& c = request_.model.vit;
  const auto& cluster = request_.cluster;
  const double q = std::round(std::cbrt(static_cast<double>(layout_.tp)));
  const int lines = static_cast<int>(q);
  const auto line = tp_group(lines, cluster.gpus_per_node);
  const auto plane = tp_group(lines * lines, cluster.gpus_per_node);
  const double e = element_;
  const double T = static_cast<double>(samples) * static_cast<double>(c.num_tokens());
  const double h = static_cast<double>(c.embed_dim());
  const double m = static_cast<double>(c.mlp_hidden_dim());
  auto on_line = [&](Collective what, double elements) { return synchronous_seconds(cluster, what, elements * e, line); };
  auto on_plane = [&](Collective what, double elements) {
    return synchronous_seconds(cluster, what, elements * e, plane);
  };
  GridComm g;
  struct Linear {
    double in, out;
    bool outer;  // reads the residual stream: its bias is all-reduced over the ij plane
  };
  const Linear linears[] = {{h, 3 * h, true}, {h, h, false}, {h, m, true}, {m, h, false}};
  for (const auto& l : linears) {
    const double input = on_line(Collective::kAllGather, T * l.in / (q * q));
    const double weight = on_line(Collective::kAllGather, l.out * l.in / (q * q));
    const double output = on_line(Collective::kReduceScatter, T * l.out / (q * q));
    g.block_forward += input + weight + output;
    g.block_backward += on_line(Collective::kAllGather, T * l.out / (q * q)) + weight + input +
                        on_line(Collective::kReduceScatter, T * l.in / (q * q)) +
                        on_line(Collective::kReduceScatter, l.out * l.in / (q * q));
    if (l.outer) {
      g.block_backward += on_plane(Collective::kAllReduce, l.out / q);
    } else {
      g.block_forward += on_plane(Collective::kAllGather, l.out / q);
      g.block_backward += on_plane(Collective::kReduceScatter, l.out / q);
    }
  }
  const double statistics = 2 * on_line(Collective::kAllReduce, T / (q * q));
  g.block_forward += 2 * (statistics + 2 * on_plane(Collective::kAllGather, h / q));
  g.block_backward += 2 * (statistics + 2 * on_plane(Collective::kReduceScatter, h / q));
  // gather_3d before the head (split_3d's backward after the embedding): the features along i,
  // then the rows over the jk plane.
  g.edge = on_line(Collective::kAllGather, T * h / (q * q)) + on_plane(Collective::kAllGather, T * h);
  return g;
}

// Every collective of tensor parallelism is waited on as soon as it is issued (the next layer
// needs its result), so each is priced with synchronous_seconds: its line plus what a call right
// after computation costs beyond it.
PassCosts LayerCosts::range(int begin, int end, int64_t samples) const {
  PassCosts pass;
  const bool checkpointing = layout_.activation_checkpointing;
  const int tp = layout_.tp;
  const auto& cluster = request_.cluster;
  const auto group = tp_group(tp, cluster.gpus_per_node);
  const auto& c = request_.model.vit;
  // A block's activation [b, T, D] (padded to a multiple of tp under sequence parallelism).
  const double tokens = layout_.sequence_parallel
                            ? static_cast<double>((c.num_tokens() + tp - 1) / tp * tp)
                            : static_cast<double>(c.num_tokens());
  const double activation = element_ * static_cast<double>(samples) * tokens * static_cast<double>(c.embed_dim());
  // Per block and pass direction: two all-reduces, or two all-gathers and two reduce-scatters.
  const double block_comm = layout_.sequence_parallel
                                ? 2 * (synchronous_seconds(cluster, Collective::kAllGather, activation, group) +
                                       synchronous_seconds(cluster, Collective::kReduceScatter, activation, group))
                                : 2 * synchronous_seconds(cluster, Collective::kAllReduce, activation, group);
  double edge_comm = synchronous_seconds(cluster, Collective::kAllGather, activation, group);
  double block_forward = block_comm, block_backward = block_comm;
  if (layout_.sequence_parallel && tp > 1) {
    // Under sequence parallelism a block's replicated parameters (the two LayerNorms' weights
    // and biases, the row-parallel proj and fc2 biases) see only this rank's tokens, so each
    // gradient is summed over tp as backward produces it (shardformer's sum_partial_gradients):
    // six small all-reduces a block, latency-bound.
    const double width_bytes = element_ * static_cast<double>(c.embed_dim());
    block_backward += kSequenceParallelPartialGradients * synchronous_seconds(cluster, Collective::kAllReduce, width_bytes, group);
  }
  if (layout_.tp_mode != "1d" && tp > 1) {
    const auto grid = layout_.tp_mode == "3d"     ? grid_3d_comm(samples)
                      : layout_.tp_mode == "2.5d" ? grid_25d_comm(samples)
                                                  : grid_2d_comm(samples, static_cast<int>(std::lround(
                                                                              std::sqrt(static_cast<double>(tp)))));
    block_forward = grid.block_forward;
    block_backward = grid.block_backward;
    edge_comm = grid.edge;
  }
  for (int l = begin; l < end; ++l) {
    const std::string kind = l == 0 ? "patch_embedding" : l <= depth_ ? "encoder_block" : "head";
    const auto t = times(kind, samples);
    // The first layer's input needs no gradient: checkpointing does not apply to it.
    const bool recomputed = checkpointing && l > 0;
    pass.forward += recomputed ? t.checkpointed_forward : t.forward;
    if (recomputed) {
      pass.backward += t.checkpointed_backward;
      const double again = std::max(t.checkpointed_backward - t.backward, 0.0);
      pass.recompute += again;
      pass.input_grad += std::max(t.checkpointed_backward - t.weight_grad, 0.0);
    } else {
      pass.backward += t.backward;
      pass.input_grad += t.input_grad;
    }
    pass.weight_grad += t.weight_grad;
    if (tp > 1 && kind == "encoder_block") {
      pass.tp_forward += block_forward;
      pass.tp_backward += block_backward + (recomputed ? block_forward : 0.0);
    }
    // Sequence parallelism and the grid modes enter their split region after the patch embedding
    // (gathered in its backward) and leave it before the head (gathered in its forward).
    const bool split_region = splits_activations();
    if (tp > 1 && split_region && kind == "patch_embedding") pass.tp_backward += edge_comm;
    if (tp > 1 && split_region && kind == "head") pass.tp_forward += edge_comm;
  }
  return pass;
}

}  // namespace colo::planner::detail
