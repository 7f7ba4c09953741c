#include <colo/booster/cross_entropy.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <stdexcept>

namespace colo {

torch::Tensor soft_target_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::sum(-targets * torch::log_softmax(logits, -1), -1).mean();
}

Criterion cross_entropy_criterion(double label_smoothing) {
  if (!(label_smoothing >= 0 && label_smoothing < 1)) {
    throw std::invalid_argument(fmt::format("cross_entropy_criterion: label_smoothing {} must be in [0, 1)", label_smoothing));
  }
  return [label_smoothing](const torch::Tensor& output, const torch::Tensor& target) {
    const auto logits = output.to(torch::kFloat);
    if (target.is_floating_point()) {
      if (target.dim() != 2 || target.sizes() != logits.sizes()) {
        throw std::invalid_argument(fmt::format("cross-entropy: soft targets {} do not match the logits {}",
                                                c10::str(target.sizes()), c10::str(logits.sizes())));
      }
      return soft_target_cross_entropy(logits, target.to(torch::kFloat));
    }
    return torch::nn::functional::cross_entropy(
        logits, target,
        torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(static_cast<double>(label_smoothing)));
  };
}

}  // namespace colo
