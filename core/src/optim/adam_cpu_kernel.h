// The inner loop of adam_step_cpu, kept in a translation unit of its own: it is compiled with
// -fno-math-errno (so that sqrtf vectorises) and without LibTorch's headers.
#pragma once

#include <cstdint>

namespace colo::optim::detail {

// Scalars of one Adam update, precomputed in double and rounded to float once, as LibTorch's
// float kernels round their Scalar arguments.
struct AdamCoefficients {
  float beta1;
  float one_minus_beta1;
  float beta2;
  float one_minus_beta2;
  float eps;
  float decay;          // AdamW: 1 - lr * weight_decay
  float l2;             // Adam: weight_decay
  float neg_step_size;  // -lr / bias_correction1
  float inv_sqrt_bias_correction2;
  bool decoupled;  // AdamW
};

void adam_update(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                 const AdamCoefficients& c);

}  // namespace colo::optim::detail
