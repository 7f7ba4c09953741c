#include <colo/checkpoint/finite_check.h>
#include <fmt/format.h>

namespace colo::checkpoint {

void require_finite(const NamedTensors& tensors, const std::string& source) {
  torch::NoGradGuard no_grad;
  for (const auto& [name, tensor] : tensors) {
    if (!tensor.defined() || !tensor.is_floating_point()) continue;
    // One pass for the common, healthy case; the details only for a tensor that fails it.
    if (torch::isfinite(tensor).all().item<bool>()) continue;
    const auto bad = torch::isfinite(tensor.reshape({-1})).logical_not();
    const int64_t count = bad.sum().item<int64_t>();
    const int64_t first = bad.nonzero()[0][0].item<int64_t>();
    const double value = tensor.reshape({-1})[first].to(torch::kFloat64).item<double>();
    throw CheckpointError(fmt::format(
        "{}: tensor '{}' holds {} non-finite value{} (NaN or infinity) of {}; the first, {}, at flat index {}. The "
        "file is damaged, or was saved by a run that had diverged: nothing was loaded; use another checkpoint",
        source, name, count, count == 1 ? "" : "s", tensor.numel(), value, first));
  }
}

}  // namespace colo::checkpoint
