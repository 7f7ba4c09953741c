#include "adam_cpu_kernel.h"

#include <cmath>

namespace colo::optim::detail {
namespace {

// One pass per element in the order of torch::optim::AdamW/Adam's tensor ops, so that results
// agree with them to rounding. Restrict pointers and no branches in the body let the compiler
// vectorise it.
template <bool kDecoupled>
void update(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v, int64_t n,
            const AdamCoefficients& c) {
  const float beta1 = c.beta1, one_minus_beta1 = c.one_minus_beta1;
  const float beta2 = c.beta2, one_minus_beta2 = c.one_minus_beta2;
  const float eps = c.eps, decay = c.decay, l2 = c.l2, neg_step_size = c.neg_step_size;
  const float inv_sqrt_bc2 = c.inv_sqrt_bias_correction2;
  for (int64_t i = 0; i < n; ++i) {
    float param = p[i];
    float grad = g[i];
    if constexpr (kDecoupled) {
      param = param * decay;
    } else {
      grad = grad + l2 * param;
    }
    const float exp_avg = m[i] * beta1 + one_minus_beta1 * grad;
    const float exp_avg_sq = v[i] * beta2 + one_minus_beta2 * grad * grad;
    const float denom = std::sqrt(exp_avg_sq) * inv_sqrt_bc2 + eps;
    m[i] = exp_avg;
    v[i] = exp_avg_sq;
    p[i] = param + neg_step_size * (exp_avg / denom);
  }
}

}  // namespace

void adam_update(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                 const AdamCoefficients& c) {
  if (c.decoupled) {
    update<true>(param, grad, exp_avg, exp_avg_sq, n, c);
  } else {
    update<false>(param, grad, exp_avg, exp_avg_sq, n, c);
  }
}

}  // namespace colo::optim::detail
