#pragma once

#include <colo/data/data_loader.h>

#include <cstdint>

namespace colo {

// Where training is: saved with a whole training state so that a resumed run continues exactly
// (same batches, same random numbers) where the saved one stopped.
struct TrainingProgress {
  int64_t epoch = 0;
  int64_t global_step = 0;            // optimizer steps taken
  data::DataLoaderState data;          // the loader's position within its epoch
};

}  // namespace colo
