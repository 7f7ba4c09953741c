#pragma once

#include <colo/booster/model_wrapper.h>
#include <colo/booster/optimizer_wrapper.h>

#include <torch/arg.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace colo::dist {
class ProcessGroup;
}
namespace colo::optim {
class LRScheduler;
}

namespace colo {

struct SaveOptions {
  // Split into files of at most max_shard_mb, with a JSON index (Hugging Face's layout).
  TORCH_ARG(bool, shard) = false;
  // A tensor larger than this gets a file of its own.
  TORCH_ARG(double, max_shard_mb) = 1024;
};

// Saves and loads boosted state in colo's checkpoint format (docs/checkpoint_format.md):
// safetensors files under canonical (timm) names and full shapes, so that a checkpoint written
// under any plugin and layout loads under any other. Rank 0 writes (every rank takes part in
// gathering sharded state); every rank reads. Files are written atomically.
//   <dir>/model.safetensors                  or model-0000k-of-0000n.safetensors + model.safetensors.index.json
//   <dir>/optimizer.safetensors + optimizer.json
//   <dir>/lr_scheduler.json
class CheckpointIO {
 public:
  explicit CheckpointIO(std::shared_ptr<dist::ProcessGroup> world);
  virtual ~CheckpointIO() = default;

  virtual void save_model(ModelWrapper& model, const std::string& dir, const SaveOptions& options = {});
  virtual void load_model(ModelWrapper& model, const std::string& dir);
  virtual void save_optimizer(OptimizerWrapper& optimizer, const std::string& dir, const SaveOptions& options = {});
  virtual void load_optimizer(OptimizerWrapper& optimizer, const std::string& dir);
  virtual void save_lr_scheduler(optim::LRScheduler& scheduler, const std::string& dir);
  virtual void load_lr_scheduler(optim::LRScheduler& scheduler, const std::string& dir);

 protected:
  bool is_writer() const;
  void barrier() const;
  // The largest file of a sharded set, in bytes (0: one file); throws for a size that is not positive.
  static int64_t max_shard_bytes(const SaveOptions& options);
  // The plain numbers of a state (learning rates, loss scaler, scheduler) as a JSON object.
  static std::map<std::string, double> read_number_map(const std::string& path);
  static void write_number_map(const std::string& path, const std::map<std::string, double>& values);
  std::shared_ptr<dist::ProcessGroup> world_;
};

}  // namespace colo
