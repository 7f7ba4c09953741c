#include <colo/amp/grad_clip.h>
#include <colo/dist/process_group.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

namespace colo::amp {
namespace {

std::vector<torch::Tensor> defined(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) {
    if (t.defined()) out.push_back(t);
  }
  return out;
}

}  // namespace

torch::Tensor grad_sq_norm(const std::vector<torch::Tensor>& grads) {
  torch::NoGradGuard no_grad;
  const auto present = defined(grads);
  if (present.empty()) return torch::zeros({}, torch::kDouble);
  const auto device = present.front().device();

  // fp32 gradients of one device go through the multi-tensor kernel (one launch on CUDA).
  // Lower-precision ones are normed one by one with an fp32 result: a bf16 norm has 3
  // significant digits, too few for a clipping coefficient.
  std::map<std::string, std::vector<torch::Tensor>> fp32_by_device;
  std::vector<torch::Tensor> norms;
  for (const auto& g : present) {
    if (g.is_sparse()) {
      throw std::invalid_argument("grad_sq_norm: sparse gradients are not supported; use dense embeddings");
    }
    if (g.scalar_type() == torch::kFloat) {
      fp32_by_device[g.device().str()].push_back(g);
    } else {
      norms.push_back(torch::linalg_vector_norm(g, 2, at::OptionalIntArrayRef(), false, torch::kFloat).to(device));
    }
  }
  for (auto& [name, tensors] : fp32_by_device) {
    for (auto& n : at::_foreach_norm(tensors)) norms.push_back(n.to(device));
  }
  // Squares summed in fp64: scaled fp16 gradients (x 2^16) can square past fp32's range.
  return torch::stack(norms).to(torch::kDouble).pow(2).sum();
}

GradClipResult apply_unscale_and_clip(const std::vector<torch::Tensor>& grads, double inv_scale, double max_norm,
                                      double total_norm) {
  GradClipResult result{total_norm, !std::isfinite(total_norm)};
  if (result.found_inf) return result;
  double coefficient = inv_scale;
  if (max_norm > 0.0) coefficient *= std::min(1.0, max_norm / (total_norm + 1e-6));
  if (coefficient == 1.0) return result;
  torch::NoGradGuard no_grad;
  auto present = defined(grads);
  if (!present.empty()) at::_foreach_mul_(present, coefficient);
  return result;
}

GradClipResult unscale_and_clip(const std::vector<torch::Tensor>& grads, double inv_scale, double max_norm,
                                const std::vector<dist::ProcessGroup*>& norm_groups) {
  if (!(inv_scale > 0.0) || !std::isfinite(inv_scale)) {
    throw std::invalid_argument(fmt::format(
        "unscale_and_clip: inv_scale {} must be finite and > 0 (1 / the loss scale; 1 without scaling)", inv_scale));
  }
  auto sq = grad_sq_norm(grads);
  for (auto* group : norm_groups) {
    if (group) group->all_reduce_and_wait(sq, dist::ReduceOp::kSum);
  }
  const double total_norm = std::sqrt(sq.item<double>()) * inv_scale;
  return apply_unscale_and_clip(grads, inv_scale, max_norm, total_norm);
}

}  // namespace colo::amp
