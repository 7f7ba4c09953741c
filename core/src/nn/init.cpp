#include <colo/nn/init.h>

#include <cmath>

namespace colo::nn::init {

torch::Tensor trunc_normal_(torch::Tensor tensor, double mean, double std, double a, double b) {
  torch::NoGradGuard no_grad;
  const auto normal_cdf = [](double x) { return (1.0 + std::erf(x / std::sqrt(2.0))) / 2.0; };
  const double lower = normal_cdf((a - mean) / std);
  const double upper = normal_cdf((b - mean) / std);
  // Uniform over the truncated CDF range, mapped back through the inverse normal CDF.
  tensor.uniform_(2.0 * lower - 1.0, 2.0 * upper - 1.0);
  tensor.erfinv_();
  tensor.mul_(std * std::sqrt(2.0));
  tensor.add_(mean);
  tensor.clamp_(a, b);
  return tensor;
}

void timm_linear_init_(torch::nn::LinearImpl& linear) {
  trunc_normal_(linear.weight, 0.0, 0.02);
  if (linear.bias.defined()) {
    torch::NoGradGuard no_grad;
    linear.bias.zero_();
  }
}

}  // namespace colo::nn::init
