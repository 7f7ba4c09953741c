#include <colo/nn/drop_path.h>

#include <vector>

namespace colo::nn {

torch::Tensor drop_path(const torch::Tensor& x, double p, bool training) {
  if (p == 0.0 || !training) return x;
  const double keep = 1.0 - p;
  // One draw per sample, broadcast over all other dims.
  std::vector<int64_t> shape(static_cast<std::size_t>(x.dim()), 1);
  shape[0] = x.size(0);
  auto mask = torch::empty(shape, x.options()).bernoulli_(keep);
  if (keep > 0.0) mask.div_(keep);
  return x * mask;
}

}  // namespace colo::nn
