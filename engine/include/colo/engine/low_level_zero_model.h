#pragma once

#include <colo/amp/precision_policy.h>
#include <colo/engine/model_wrapper.h>
#include <colo/engine/zero_optimizer.h>

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace colo {

// The model as low_level_zero hands it back: a replica whose working weights the ZeroOptimizer
// refreshes after each step by all-gathering the updated master shards.
//
// forward() waits for each layer's gather buckets just before running that layer, so the
// gathers launched at the end of step() overlap the first layers of the next forward. (While
// gathers are in flight it runs the stack's layers one by one, which is what LayerStack::forward
// does.) It casts floating inputs to the compute dtype and returns floating outputs in fp32, so
// that the loss is computed in fp32 (see TorchDdpModel).
//
// State (checkpoints) is the fp32 master weights, gathered from the shards, under canonical
// names and full shapes; loading writes the masters (each rank its slices) and the working
// weights. Read the model's parameters directly only after a forward or full_state(), or after
// optimizer.gather().wait_all(): until then they may still be receiving the last step's update.
class LowLevelZeroModel : public ModelWrapper {
 public:
  LowLevelZeroModel(std::shared_ptr<nn::LayerStack> module, std::shared_ptr<ZeroOptimizer> optimizer);

  torch::Tensor forward(const torch::Tensor& input) override;

  std::vector<std::pair<std::string, torch::Tensor>> full_state() const override;
  void load_full_state(const std::vector<std::pair<std::string, torch::Tensor>>& state) override;

 private:
  std::shared_ptr<ZeroOptimizer> optimizer_;
  amp::PrecisionPolicy policy_;
  // Per layer of the stack: the gather buckets holding its parameters.
  std::vector<std::vector<std::size_t>> layer_buckets_;
};

}  // namespace colo
