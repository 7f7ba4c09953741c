#include <colo/amp/grad_clip.h>
#include <colo/dist/process_group.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
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
    if (!g.is_cuda()) {
      // fp64 accumulation (see the header): exact to rounding whatever the tensor's size.
      norms.push_back(torch::linalg_vector_norm(g, 2, at::OptionalIntArrayRef(), false, torch::kDouble).to(device));
    } else if (g.scalar_type() == torch::kFloat) {
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

double global_grad_norm(const std::vector<torch::Tensor>& grads, const GradNormPlan& plan, double inv_scale,
                        const std::vector<int64_t>& pieces) {
  torch::Tensor sq;
  if (plan.tp && plan.tp->size() > 1) {
    const int64_t tp = plan.tp->size();
    if (pieces.size() != grads.size()) {
      throw std::invalid_argument(fmt::format(
          "global_grad_norm: with a tensor-parallel group, say for each of the {} gradients how many pieces of it the "
          "group holds ({} counts given)",
          grads.size(), pieces.size()));
    }
    // Each distinct piece counts once: on the first `pieces` ranks, which hold them. Then the sum
    // over the group.
    std::vector<torch::Tensor> counted;
    for (std::size_t i = 0; i < grads.size(); ++i) {
      if (pieces[i] < 1 || tp % pieces[i] != 0) {
        throw std::invalid_argument(fmt::format(
            "global_grad_norm: gradient {} is in {} pieces, which does not divide the tensor-parallel group's {} ranks",
            i, pieces[i], tp));
      }
      if (plan.tp->rank() < pieces[i]) counted.push_back(grads[i]);
    }
    sq = grad_sq_norm(counted);
    plan.tp->all_reduce_and_wait(sq, dist::ReduceOp::kSum);
  } else {
    sq = grad_sq_norm(grads);
  }
  for (const auto& group : plan.sum_over) {
    if (group) group->all_reduce_and_wait(sq, dist::ReduceOp::kSum);
  }
  if (plan.agree_over && plan.agree_over->size() > 1) {
    // MAX drops NaNs on some backends; as +inf an overflow on one replica reaches them all.
    const double inf = std::numeric_limits<double>::infinity();
    sq = at::nan_to_num(sq, inf, inf, -inf);
    plan.agree_over->all_reduce_and_wait(sq, dist::ReduceOp::kMax);
  }
  return std::sqrt(sq.item<double>()) * inv_scale;
}

GradClipResult unscale_and_clip(const std::vector<torch::Tensor>& grads, double inv_scale, double max_norm,
                                const GradNormPlan& plan, const std::vector<int64_t>& pieces) {
  if (!(inv_scale > 0.0) || !std::isfinite(inv_scale)) {
    throw std::invalid_argument(fmt::format(
        "unscale_and_clip: inv_scale {} must be finite and > 0 (1 / the loss scale; 1 without scaling)", inv_scale));
  }
  return apply_unscale_and_clip(grads, inv_scale, max_norm, global_grad_norm(grads, plan, inv_scale, pieces));
}

}  // namespace colo::amp
