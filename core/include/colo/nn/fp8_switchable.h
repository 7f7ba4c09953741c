#pragma once

#include <cstdint>
#include <memory>
#include <utility>

namespace colo::nn {

struct Fp8OperandScales;  // colo/nn/fp8_scaling.h

// A layer whose matrix products can run in float8 (colo::nn::Linear, the shardformer's parallel
// linears), through colo::nn::fp8_linear. Off until colo::nn::use_fp8_linears (precision=fp8)
// turns it on. Kept free of LibTorch so that light headers can derive from it.
class Fp8Switchable {
 public:
  virtual ~Fp8Switchable() = default;
  // The layer's (in, out) features as it multiplies them (a tensor-parallel shard's own).
  virtual std::pair<int64_t, int64_t> fp8_features() const = 0;
  virtual void set_fp8(bool on) = 0;
  virtual bool fp8() const = 0;
  // Delayed scaling's scales and amax slots for this layer's operands (use_fp8_linears under
  // Fp8Scaling::kDelayed); null: current scaling.
  virtual void set_fp8_scales(std::shared_ptr<const Fp8OperandScales> scales) = 0;
  virtual const Fp8OperandScales* fp8_scales() const = 0;
};

// Fp8Switchable with the switch kept here: a layer adds only fp8_features() and reads fp8_.
class Fp8SwitchableLayer : public Fp8Switchable {
 public:
  void set_fp8(bool on) override { fp8_ = on; }
  bool fp8() const override { return fp8_; }
  void set_fp8_scales(std::shared_ptr<const Fp8OperandScales> scales) override { fp8_scales_ = std::move(scales); }
  const Fp8OperandScales* fp8_scales() const override { return fp8_scales_.get(); }

 protected:
  bool fp8_ = false;
  std::shared_ptr<const Fp8OperandScales> fp8_scales_;
};

}  // namespace colo::nn
