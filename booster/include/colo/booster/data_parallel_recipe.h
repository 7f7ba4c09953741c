#pragma once

// The boost() of a plugin whose every rank holds the whole model as a data-parallel member of its
// world: torch_ddp (zero_stage 0), low_level_zero (1, 2), gemini (3), or a third-party plugin of
// that shape. One recipe, in the order that loses nothing on bad input:
//   the inputs checked → the optimizer checked for the engine (before anything changes) → the
//   loader sharded over the world → the model on the device, broadcast from rank 0 → float8
//   products under precision=fp8 (scaled as `fp8` says) → apply_data_parallel over the world → under
//   delayed float8 scaling, its update after each step, agreed over the world → `finish` (what the
//   plugin adds on top, e.g. torch_ddp's CUDA graphs) → the engine's halves handed back with the mesh.
#include <colo/amp/precision.h>
#include <colo/booster/boosted.h>
#include <colo/nn/fp8_scaling.h>

#include <functional>

namespace colo {

class DataParallelEngine;
class Plugin;
struct DataParallelOptions;

// Errors name `plugin.name()`; the engine's name options.caller().
Boosted boost_data_parallel(const Plugin& plugin, BoostInputs inputs, const DataParallelOptions& options,
                            amp::Precision precision, const nn::Fp8Recipe& fp8,
                            const std::function<void(DataParallelEngine&)>& finish = {});

}  // namespace colo
