#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

namespace colo::dist {
class ProcessGroup;
}

namespace colo::amp {

struct GradClipResult {
  // Global L2 norm of the unscaled gradients, before clipping (inf or nan on overflow).
  double total_norm = 0.0;
  // An inf or nan in some gradient (on some rank of the norm groups): the step must be skipped.
  // The gradients are then left untouched.
  bool found_inf = false;
};

// Sum of squares of all elements of `grads`, as an fp64 0-dim tensor on the first defined
// gradient's device (a CPU zero when there is none). Undefined tensors are skipped. An inf or
// nan anywhere makes it inf or nan (so does a single gradient whose norm exceeds fp32's range,
// which callers treat as an overflow too). No host synchronisation.
//
// Each tensor's norm is accurate whatever its size, so the result does not depend on how the
// gradients are cut into tensors (per parameter, or a ZeRO rank's flat shard): on CPUs each
// tensor is reduced with fp64 accumulation, because LibTorch's CPU norm kernel accumulates fp32
// in a few sequential lanes (measured 1e-5 relative error at 1 M elements, 1.3e-4 at 5 M); CUDA's
// norm kernels reduce in a tree and are accurate in fp32.
torch::Tensor grad_sq_norm(const std::vector<torch::Tensor>& grads);

// How the squared norms of this rank's gradients combine into the norm of the whole model's
// gradient. Every plugin computes its clipping norm through global_grad_norm with its plan, so
// that the norm does not depend on the plugin or the layout beyond rounding.
struct GradNormPlan {
  // Groups over which each rank holds a DISJOINT part of the gradients: the squared norms are
  // summed over each in turn (ZeRO's data-parallel shards, pipeline stages, tensor-parallel
  // shards). Replicated gradients (plain data parallel after its all-reduce) need no group.
  std::vector<std::shared_ptr<dist::ProcessGroup>> sum_over;
  // Ranks holding the SAME gradients that must agree on an overflow (fp16): a MAX of the result
  // over this group makes an inf or nan on one replica reach them all, so every rank skips the
  // same steps. Null (or one rank): no such reduction.
  std::shared_ptr<dist::ProcessGroup> agree_over;
  // The tensor-parallel group: each gradient counts once per distinct piece the group holds of
  // it (`pieces`, below): split over every rank (1D's splits, 2D's weight blocks) its squares are
  // summed over the group; whole on every rank (replicated) it counts once, on the group's rank 0,
  // not tp times; in between (2D's LayerNorms and biases: q pieces, each repeated down a grid
  // column) on the ranks that hold the distinct pieces. Null (or one rank): no tensor parallelism.
  std::shared_ptr<dist::ProcessGroup> tp;
};

// The global L2 norm of the unscaled gradients: inv_scale * sqrt(sum of squares over the plan),
// inf or nan on overflow anywhere in the plan's groups. One host synchronisation. With a
// tensor-parallel group in the plan, `pieces` says for each gradient how many distinct pieces of
// its parameter the group holds (nn::pieces_of its cuts: 1 when whole), held by the group's first
// `pieces` ranks (as nn::unshard orders them), which count it; std::invalid_argument unless there
// is one count per gradient, each dividing the group's size.
double global_grad_norm(const std::vector<torch::Tensor>& grads, const GradNormPlan& plan, double inv_scale = 1.0,
                        const std::vector<int64_t>& pieces = {});

// Unscales and clips gradients in one pass: computes the global L2 norm of the unscaled
// gradients (global_grad_norm over `plan`), then multiplies every gradient once by
//     inv_scale * min(1, max_norm / (norm + 1e-6))
// (torch.nn.utils.clip_grad_norm_'s coefficient, applied together with the unscaling).
// max_norm <= 0 means no clipping (unscale only; the norm is still returned and checked).
// Because an inf or nan on any rank makes the summed norm non-finite everywhere, found_inf
// agrees across the plan's groups. Undefined tensors in `grads` are skipped.
GradClipResult unscale_and_clip(const std::vector<torch::Tensor>& grads, double inv_scale, double max_norm,
                                const GradNormPlan& plan = {}, const std::vector<int64_t>& pieces = {});

// The second half of unscale_and_clip, for callers that have the global norm of the unscaled
// gradients already. Returns found_inf = !isfinite(total_norm) and, when finite, applies the
// single multiply described above.
GradClipResult apply_unscale_and_clip(const std::vector<torch::Tensor>& grads, double inv_scale, double max_norm,
                                      double total_norm);

}  // namespace colo::amp
