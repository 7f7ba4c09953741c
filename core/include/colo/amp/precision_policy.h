#pragma once

#include <colo/amp/precision.h>
#include <torch/types.h>

namespace colo::amp {

// What a plugin does for one training precision; the single place that decides it.
//
//             compute dtype   fp32 master weights   loss scaler
//   fp32      float32         no (weights are fp32)  no
//   bf16      bfloat16        yes (default)          no: bf16 has fp32's exponent range
//   fp16      float16         yes (default)          yes: small gradients underflow fp16
//   fp8       bfloat16, linear yes (default)          no: each product scales its operands
//             layers' products                          to float8's range (per tensor, per step)
//             in float8
//
// Master weights: the optimizer updates fp32 copies and the working weights are rounded copies
// of them (see MasterWeights); updating bf16/fp16 weights directly loses every update smaller
// than half an ulp of the weight. Turning them off ("pure" low-precision training) halves the
// weight + optimizer-state memory at that cost.
//
// CPU note (LibTorch 1.13, the CPU build): bf16 has CPU kernels for everything a ViT needs
// (linear, layer_norm, gelu, softmax, conv2d, cross_entropy, dropout, and their backwards);
// fp16 has almost none ("addmm_impl_cpu_ not implemented for 'Half'"), so fp16 training needs a
// GPU there.
class PrecisionPolicy {
 public:
  explicit PrecisionPolicy(Precision precision = Precision::kFp32) : precision_(precision) {}

  // Keeps (true, the default) or drops fp32 master weights; no effect for fp32.
  PrecisionPolicy& master_weights(bool keep) {
    keep_master_weights_ = keep;
    return *this;
  }

  Precision precision() const { return precision_; }
  // Dtype of the working weights, activations and gradients.
  torch::Dtype compute_dtype() const { return to_dtype(precision_); }
  // True when the optimizer should step fp32 masters rather than the working weights.
  bool uses_master_weights() const { return precision_ != Precision::kFp32 && keep_master_weights_; }
  // True for fp16 only: the loss must be scaled up before backward (DynamicLossScaler).
  bool needs_loss_scaler() const { return precision_ == Precision::kFp16; }
  // True for fp8: the model's linear layers multiply in float8 (colo::nn::use_fp8_linears).
  bool uses_fp8_matmuls() const { return precision_ == Precision::kFp8; }

  // Floating tensors (e.g. input images) cast to the compute dtype; others returned unchanged.
  torch::Tensor cast_to_compute(const torch::Tensor& tensor) const {
    return tensor.is_floating_point() ? tensor.to(compute_dtype()) : tensor;
  }

 private:
  Precision precision_;
  bool keep_master_weights_ = true;
};

}  // namespace colo::amp
