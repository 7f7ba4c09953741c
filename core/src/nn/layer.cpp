#include <colo/nn/layer.h>

#include <colo/nn/activation_checkpoint.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>

namespace colo::nn {

torch::Tensor Layer::run(const torch::Tensor& x) {
  return activation_checkpointing_ ? checkpointed_forward(*this, x) : forward(x);
}

void Layer::replace_submodule(const std::string& path, torch::nn::AnyModule /*module*/) {
  const auto paths = replaceable_submodules();
  throw std::invalid_argument(fmt::format(
      "replace_submodule (layer '{}'): '{}' cannot be replaced; {}", canonical_prefix(), path,
      paths.empty() ? "this layer lets none of its sub-modules be replaced (override nn::Layer::replace_submodule)"
                    : fmt::format("valid paths: {}", fmt::join(paths, ", "))));
}

}  // namespace colo::nn
