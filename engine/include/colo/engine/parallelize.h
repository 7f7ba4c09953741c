#pragma once


// The steps every plugin's boost() is composed of, each a small function
// over the process group it works on, the way torchtitan applies one parallelism after another:
// torch_ddp and low_level_zero call them with the world as the data-parallel group,
// hybrid_parallel with its mesh's groups. The optimizer wrappers are the remaining steps:
// MixedPrecisionOptimizer (precision, over a amp::GradNormPlan) and ZeroOptimizer (ZeRO-1/2 over
// a data-parallel group).
#include <colo/amp/precision.h>
#include <colo/ddp/bucketed_all_reduce.h>
#include <colo/nn/fp8_scaling.h>

#include <c10/core/Device.h>
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace colo::data {
class DataLoader;
}
namespace colo::dist {
class ProcessGroup;
}
namespace colo::nn {
class CudaGraphedStack;
class LayerStack;
}

namespace colo {

class OptimizerWrapper;

// Moves the model to `device` and makes every rank of `group` start from the same values: its
// parameters and buffers are broadcast from the group's rank 0. Call it before any cast to a
// lower precision, so that replicas agree on the fp32 values their masters keep.
void broadcast_model(nn::LayerStack& model, c10::Device device, dist::ProcessGroup& group);

// precision=fp8: float8 products in every linear layer of `model` that fits (colo::nn::use_fp8_linears,
// which also says why a layer stays bf16); nothing for other precisions. Call it after broadcast_model
// (it checks the device the layers now live on) and after tensor-parallel sharding (a shard's own
// features decide). Throws std::invalid_argument where the device has no float8 products.
// Returns the model's delayed-scaling state under fp8 with `fp8`'s delayed scaling (null
// otherwise), its layers named by their canonical names: give it to attach_fp8_scaling with the optimizer.
std::shared_ptr<nn::Fp8DelayedScaling> apply_matmul_precision(nn::LayerStack& model, amp::Precision precision,
                                                              c10::Device device, const nn::Fp8Recipe& fp8 = {});

// Delayed float8 scaling: `optimizer`'s every step ends with `scaling`'s update, its amaxes agreed
// (max-reduced) over `agree_over` (the groups whose ranks hold the same layers: data parallelism;
// tensor parallelism, whose ranks hold pieces of them), and the optimizer's checkpoints carry the
// state (OptimizerWrapper::CheckpointedCompanion): per layer "fp8_scaling.<layer>.<operand>.amax_history",
// ".scale", ".nonfinite_amaxes", and the scalar "fp8_scaling.primed". A checkpoint without them
// (saved under fp8_scaling=current or another precision) resumes with a fresh history, scaled as
// current scaling for the first step; one with some of this run's layers missing, or another
// history length, is refused. Nothing when `scaling` is null.
void attach_fp8_scaling(OptimizerWrapper& optimizer, std::shared_ptr<nn::Fp8DelayedScaling> scaling,
                        std::vector<std::shared_ptr<dist::ProcessGroup>> agree_over);

// Data-parallel gradient averaging over `group`: bucketed all-reduces driven by hooks on the
// model's parameters, which must have their final device and dtype. Null when the group has one
// rank (nothing to average; autograd's own gradients, without the copy into buckets).
std::shared_ptr<ddp::BucketedAllReduce> apply_ddp(const nn::LayerStack& model, std::shared_ptr<dist::ProcessGroup> group,
                                                  const ddp::BucketedAllReduceOptions& options);

// cuda_graphs under data parallelism: a graph replay fires none of `reducer`'s gradient hooks, so
// the end of every synchronised backward pass that replayed one of `graphed`'s backward graphs
// averages the accumulated gradients there (reduce_accumulated; no overlap with backward). An
// unsynchronised pass (no_sync, or a pipeline's microbatches, reduced after the step) does
// nothing. A null reducer (one rank) leaves `graphed` as it is.
void reduce_after_graph_backward(nn::CudaGraphedStack& graphed, const std::shared_ptr<ddp::BucketedAllReduce>& reducer);

// Re-points the user's optimizer at the parameters this rank holds (`model`: a pipeline stage's
// layers, say), in place: each parameter group keeps its options and its other parameters (a
// group left without any stays, empty, so that group indices, and the learning rates schedulers
// and checkpoints record per group, keep their meaning); state of parameters dropped is dropped.
// Parameters of `model` the optimizer does not hold stay outside it (frozen or fine-tuned parts).
void restrict_optimizer(torch::optim::Optimizer& optimizer, const nn::LayerStack& model);

// Splits the loader's data over the data-parallel group (each rank its shard). Throws
// std::invalid_argument, naming the plugin, when the data cannot be split that way.
void shard_dataloader(data::DataLoader& loader, const dist::ProcessGroup& dp_group, const std::string& plugin);

// The samples each data-parallel rank takes per forward/backward pass from a global batch split
// over `dp_size` ranks and `accumulation_steps` passes. Throws std::invalid_argument saying what to
// use when the batch does not split evenly: a run and its memory plan (MemoryPlan::samples_per_pass)
// both split through here, so a plan refuses what the run refuses.
int64_t per_rank_batch(int64_t global_batch, int64_t dp_size, int64_t accumulation_steps);

// A job planned for `planned_dp` data-parallel ranks x `planned_accumulation` passes per step that
// runs on `dp_size` ranks instead (colo-run --elastic left some out: colo/env/elastic.h) keeps its
// global batch, and so its training math up to summation order, by accumulating more: the
// smallest accumulation a with dp_size * a >= planned_dp * planned_accumulation (no rank takes a
// larger micro-batch than planned, so what fitted in memory still fits) that splits the batch
// evenly. nullopt when none does (dp_size does not divide the global batch). Throws
// std::invalid_argument for a value below 1.
std::optional<int64_t> accumulation_keeping_global_batch(int64_t global_batch, int64_t dp_size, int64_t planned_dp,
                                                         int64_t planned_accumulation);

}  // namespace colo
