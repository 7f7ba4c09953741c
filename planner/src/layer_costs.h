#pragma once
// The compute and tensor-parallel terms of one micro-batch pass over a range of layers on one
// rank: what the step model builds steps and pipeline stages from.

#include <colo/planner/step_model.h>

namespace colo::planner::detail {

// Gradients a block sums over tp under 1D sequence parallelism, each of the embedding width:
// norm1 and norm2's weight and bias, attn.proj's and mlp.fc2's bias (checked against the code by
// tests/dist/tp_traffic_test.cpp).
inline constexpr int kSequenceParallelPartialGradients = 6;

// One pass (forward and backward of one micro-batch) over some layers.
struct PassCosts {
  double forward = 0;      // compute of the forward (checkpointed: without keeping the graph)
  double backward = 0;     // the whole backward (checkpointed: the recomputed forward too)
  double input_grad = 0;   // zero bubble's B (checkpointed: with the recomputed forward)
  double weight_grad = 0;  // zero bubble's W
  double recompute = 0;    // the recomputed forward inside backward
  double tp_forward = 0;   // tensor-parallel collectives of the forward
  double tp_backward = 0;  // of the backward (the recomputed forward's included)
};

// Layers are numbered as the ViT's stack: 0 the patch embedding, 1..depth the blocks, depth + 1
// the head.
class LayerCosts {
 public:
  LayerCosts(const PlanRequest& request, const Layout& layout);

  // Layers [begin, end) for a micro-batch of `samples`.
  PassCosts range(int begin, int end, int64_t samples) const;
  // Bytes of the activation (or its gradient) a pipeline stage sends per micro-batch, per rank
  // of a tp group.
  double boundary_bytes(int64_t samples) const;
  int num_layers() const { return depth_ + 2; }
  // Bytes of one element in the compute dtype.
  double element_bytes() const { return element_; }

 private:
  LayerTimes times(const std::string& layer, int64_t samples) const;
  // tp_mode 2d, 2.5d and 3d: one block's collectives each way, and the region's entry/exit gathers.
  struct GridComm {
    double block_forward = 0, block_backward = 0, edge = 0;
  };
  // 2d on a q x q grid for `samples` (2.5d: one layer's share, samples / d).
  GridComm grid_2d_comm(int64_t samples, int q) const;
  GridComm grid_25d_comm(int64_t samples) const;
  GridComm grid_3d_comm(int64_t samples) const;
  // Whether the blocks' activations are this rank's share (sequence parallelism, 2d, 2.5d, 3d).
  bool splits_activations() const;
  LayerTimes analytic(const std::string& layer, int64_t samples) const;

  const PlanRequest& request_;
  const Layout& layout_;
  int depth_;
  double element_;
  bool use_profile_;
};

}  // namespace colo::planner::detail
