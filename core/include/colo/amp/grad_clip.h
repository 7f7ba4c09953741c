#pragma once

#include <torch/torch.h>

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
torch::Tensor grad_sq_norm(const std::vector<torch::Tensor>& grads);

// Unscales and clips gradients in one pass: computes the global L2 norm of the unscaled
// gradients, norm = inv_scale * sqrt(sum of squares), then multiplies every gradient once by
//     inv_scale * min(1, max_norm / (norm + 1e-6))
// (torch.nn.utils.clip_grad_norm_'s coefficient, applied together with the unscaling).
// max_norm <= 0 means no clipping (unscale only; the norm is still returned and checked).
//
// norm_groups: the sum of squares is all-reduced (SUM) over each group in turn, so pass
// exactly the groups over which each rank holds a DISJOINT part of the gradients: the dp group
// when gradients are sharded over it (ZeRO-2), the pp group (each stage holds its own layers),
// the tp group for tensor-parallel shards. Replicated gradients (plain data parallel after the
// all-reduce) need no group: every rank already computes the same norm. Because an inf or nan
// on any rank makes the summed norm non-finite everywhere, found_inf agrees across the groups.
//
// One host synchronisation (to read the norm). Undefined tensors in `grads` are skipped.
GradClipResult unscale_and_clip(const std::vector<torch::Tensor>& grads, double inv_scale, double max_norm,
                                const std::vector<dist::ProcessGroup*>& norm_groups = {});

// The second half of unscale_and_clip, for callers that reduce the norm themselves (e.g. a
// tensor-parallel plugin that must not count replicated parameters twice): `total_norm` is the
// global norm of the unscaled gradients. Returns found_inf = !isfinite(total_norm) and, when
// finite, applies the single multiply described above.
GradClipResult apply_unscale_and_clip(const std::vector<torch::Tensor>& grads, double inv_scale, double max_norm,
                                      double total_norm);

}  // namespace colo::amp
