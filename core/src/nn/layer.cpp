#include "colo/nn/layer.h"

#include "colo/nn/activation_checkpoint.h"

namespace colo::nn {

torch::Tensor Layer::run(const torch::Tensor& x) {
  return activation_checkpointing_ ? checkpointed_forward(*this, x) : forward(x);
}

}  // namespace colo::nn
