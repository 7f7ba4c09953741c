#pragma once

#include <cstdint>

namespace colo::zero {

// How a ZeRO optimizer's gradient shard (ShardedAdam::grad()) gets the gradients of this rank's
// shard, averaged over the data-parallel ranks, from backward passes:
//   stage 1   AllReduceGradReducer       buckets all-reduced during backward; every rank keeps
//                                        the whole averaged gradient and takes its chunks
//   stage 2   ReduceScatterGradReducer   buckets reduce-scattered during backward; each rank
//                                        keeps only its shard
// Both overlap communication with backward through the same hook machinery
// (ddp::GradBucketScheduler) and both accumulate: several synchronised backward passes before a
// step sum their averaged gradients, as single-process training sums its gradients.
class GradReducer {
 public:
  virtual ~GradReducer() = default;

  // Before a step: makes the gradient shard hold this rank's part of every gradient reduced
  // since zero_grad().
  virtual void finalize() = 0;
  // Forgets every gradient (the shard and whatever the reducer holds).
  virtual void zero_grad() = 0;

  // Gradient accumulation: off, backward passes accumulate gradients locally in param.grad
  // without communicating; the next synchronised pass reduces the sum.
  virtual void set_sync(bool enabled) = 0;
  virtual bool sync_enabled() const = 0;
  // Reduces, now and without a backward pass, the gradients accumulated in param.grad with sync
  // off, as a synchronised pass would have (ddp::GradBucketScheduler::reduce_accumulated).
  virtual void reduce_accumulated() = 0;
  // Before each forward: drops the state of a backward pass that failed midway.
  virtual void prepare_for_backward() = 0;
  // Backward passes whose gradients were reduced so far.
  virtual int64_t synchronized_passes() const = 0;
};

}  // namespace colo::zero
