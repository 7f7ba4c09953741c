#pragma once

#include <colo/amp/master_weights.h>
#include <colo/amp/precision_policy.h>
#include <colo/engine/model_wrapper.h>
#include <colo/ddp/bucketed_all_reduce.h>
#include <colo/nn/cuda_graphed_stack.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace colo::dist {
class ProcessGroup;
}

namespace colo {

// The model as torch_ddp hands it back: a replica whose gradients the BucketedAllReduce
// averages over the world during backward.
//
// forward() casts floating inputs to the compute dtype and returns floating outputs in fp32,
// so that the user's criterion computes the loss in fp32 whatever the precision (required
// for fp16: the loss scale alone exceeds fp16's range; also the accurate choice for bf16
// softmax-cross-entropy). With broadcast_buffers, rank 0's buffers are broadcast before each
// training forward (batch-norm statistics, say; the ViT has none, so it costs nothing there).
//
// State (checkpoints) is the fp32 master weights where they exist, under canonical names;
// loading writes the masters and the working weights.
class TorchDdpModel : public ModelWrapper {
 public:
  TorchDdpModel(std::shared_ptr<nn::LayerStack> module, std::shared_ptr<ddp::BucketedAllReduce> reducer,
                amp::PrecisionPolicy policy, std::shared_ptr<amp::MasterWeights> masters,
                std::shared_ptr<dist::ProcessGroup> buffer_sync_group);

  torch::Tensor forward(const torch::Tensor& input) override;
  void set_gradient_sync(bool enabled) override;
  bool gradient_sync() const override;
  void reduce_accumulated_gradients() override;

  std::vector<std::pair<std::string, torch::Tensor>> full_state() const override;
  void load_full_state(const std::vector<std::pair<std::string, torch::Tensor>>& state) override;

  // Null in a world of one, where there is nothing to average.
  const std::shared_ptr<ddp::BucketedAllReduce>& reducer() const { return reducer_; }
  // Training passes through CUDA graphs of the stack (cuda_graphs=true; with several ranks the
  // stack reduces at the end of a synchronised backward, see reduce_after_graph_backward).
  void use_cuda_graphs(std::shared_ptr<nn::CudaGraphedStack> graphed) { graphed_ = std::move(graphed); }

 private:
  std::shared_ptr<ddp::BucketedAllReduce> reducer_;
  amp::PrecisionPolicy policy_;
  std::shared_ptr<amp::MasterWeights> masters_;
  std::shared_ptr<dist::ProcessGroup> buffer_sync_group_;  // null: buffers are not broadcast
  std::vector<torch::Tensor> buffers_;
  std::shared_ptr<nn::CudaGraphedStack> graphed_;  // null: eager
};

}  // namespace colo
