#pragma once

#include <colo/amp/dynamic_loss_scaler.h>
#include <colo/amp/precision.h>
#include <colo/nn/fp8_scaling.h>
#include <colo/booster/plugin_options.h>
#include <torch/arg.h>

namespace colo {

// The options every mixed-precision plugin takes alike, declared, parsed and checked in one
// place: `precision` fp32|fp16|bf16|fp8, `max_grad_norm` (0: no clipping) and the fp16 loss
// scaler's (initial_scale, min_scale, max_scale, growth_factor, backoff_factor,
// growth_interval, hysteresis), and precision=fp8's scaling (fp8_scaling current|delayed; delayed's
// fp8_amax_history_len, fp8_amax_compute_algo max|most_recent, fp8_margin: Transformer Engine's
// DelayedScaling names). A loss-scaler key given with another precision is an error, not silently
// ignored, and so is an fp8 key without precision=fp8 or a delayed-scaling key without
// fp8_scaling=delayed.
struct PrecisionOptions {
  TORCH_ARG(amp::Precision, precision) = amp::Precision::kFp32;
  TORCH_ARG(double, max_grad_norm) = 0.0;
  TORCH_ARG(amp::LossScalerOptions, loss_scaler) = {};
  TORCH_ARG(nn::Fp8Recipe, fp8) = {};

 public:

  // Declares the keys on `in` and records every problem there (in.fail); `given` is the
  // plugin's options as passed, to tell a key given from a default.
  static PrecisionOptions read(OptionReader& in, const PluginOptions& given);
  // The keys read() reads, for the values that differ from the defaults (read() gives this back).
  PluginOptions to_options() const;
};

}  // namespace colo
