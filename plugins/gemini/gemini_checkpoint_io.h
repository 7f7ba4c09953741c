#pragma once

#include <colo/booster/checkpoint_io.h>
#include <colo/checkpoint/safetensors.h>

#include <memory>
#include <string>
#include <vector>

namespace colo::plugins {

// gemini's checkpoints, in colo's format (full names and shapes: any plugin loads them, at any
// world size), saved and loaded chunk by chunk so that neither the GPU nor host memory ever holds
// a second full copy of the model or its optimizer state:
//   save: the entries are PendingTensors (GeminiModel/GeminiOptimizer::pending_full_state, made
//       by GeminiStateStreamer), each chunk gathered when the writer (rank 0) reaches its first
//       tensor and dropped after its last; the other ranks make the same entries in the same
//       order, joining each gather;
//   load: every rank checks the whole set from the files' headers, then reads and scatters one
//       chunk's tensors at a time (a chunk-sized read, seeking in the file).
// An asynchronous save (SaveOptions::async) is the exception: rank 0 gathers every chunk at the
// step boundary into a host copy of the whole state (the memory plan counts it), written later.
// Wrappers that are not gemini's fall back to CheckpointIO.
class GeminiCheckpointIO : public CheckpointIO {
 public:
  using CheckpointIO::CheckpointIO;

  void save_model(ModelWrapper& model, const std::string& dir, const SaveOptions& options = {}) override;
  void load_model(ModelWrapper& model, const std::string& dir) override;
  void save_optimizer(OptimizerWrapper& optimizer, const std::string& dir, const SaveOptions& options = {}) override;
  void load_optimizer(OptimizerWrapper& optimizer, const std::string& dir) override;

 private:
  void save_pending(const std::string& dir, const std::string& base,
                    const std::vector<checkpoint::PendingTensor>& pending, int64_t max_shard_bytes);
};

}  // namespace colo::plugins
