#pragma once

#include <torch/types.h>

#include <vector>

namespace colo::nn {

// The random-number stream of one region of a layer. Tensor parallelism needs two: dropout on what
// every rank holds alike (the residual stream, before and after a parallel block) must draw the
// same masks on every rank, so that the replicas stay identical, and dropout on what each rank
// holds alone (its heads, its hidden units) must draw different ones, or the ranks' masks would
// repeat each other. A layer that draws inside a sharded region does so under a RegionRng::Scope,
// which a tensor-parallel policy provides (shardformer::RngTracker); without one the default
// generator is used, as on one rank.
class RegionRng {
 public:
  virtual ~RegionRng() = default;
  // Makes this region's stream the one random functions draw from, and back.
  virtual void enter() = 0;
  virtual void exit() = 0;
  // The stream's position, and back to it (outside the region): activation checkpointing replays
  // a layer's forward pass with the masks it drew the first time.
  virtual std::vector<torch::Tensor> save_state() const = 0;
  virtual void restore_state(const std::vector<torch::Tensor>& state) = 0;

  // Enters `rng` (nothing when null) for its lifetime.
  class Scope {
   public:
    explicit Scope(RegionRng* rng) : rng_(rng) {
      if (rng_) rng_->enter();
    }
    ~Scope() {
      if (rng_) rng_->exit();
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    RegionRng* rng_;
  };
};

// A module that draws from a region's stream of its own (Attention and Mlp, once sharded), so
// that whoever replays its forward pass can find the stream.
class UsesRegionRng {
 public:
  virtual ~UsesRegionRng() = default;
  virtual RegionRng* region_rng() const = 0;
};

}  // namespace colo::nn
