#pragma once

#include <colo/engine/model_wrapper.h>
#include <colo/engine/optimizer_wrapper.h>

#include <torch/arg.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

namespace colo::dist {
class ProcessGroup;
}
namespace colo::optim {
class LRScheduler;
}
namespace colo::detail {
struct DeferredWrites;
}

namespace colo {

struct SaveOptions {
  // Split into files of at most max_shard_mb, with a JSON index (Hugging Face's layout).
  TORCH_ARG(bool, shard) = false;
  // A tensor larger than this gets a file of its own.
  TORCH_ARG(double, max_shard_mb) = 1024;
  // Booster::save_state only: take a host copy of the state at this step boundary (pinned memory
  // on CUDA) and write it from a background thread while training goes on. The next save, and
  // Booster::wait_for_save, wait for it; its error is thrown by the next check_save, save or wait.
  TORCH_ARG(bool, async) = false;
  // Tests only: run by the background writer before it writes (to slow it down, or to make it
  // fail); ignored by synchronous saves.
  TORCH_ARG(std::function<void()>, before_background_write) = nullptr;
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
  // What Booster::load_state runs before it changes anything, so that a refused training state
  // leaves the boosted objects as they were: each throws as the load would (a model's missing,
  // unexpected or mis-shaped names; a scheduler of other groups), reading no tensor values
  // (the model's files' headers only).
  virtual void check_model(const ModelWrapper& model, const std::string& dir);
  void check_lr_scheduler(const optim::LRScheduler& scheduler, const std::string& dir);

  // Booster::save_state's asynchronous saves: while set (non-null), the save_* calls still do
  // their collective part (gathers over the ranks) at once, take host copies of what they would
  // write, and queue the file writes in `writes` for the background writer instead of writing.
  void defer_writes_to(detail::DeferredWrites* writes) { deferred_ = writes; }
  // While set (non-null), every host copy taken for deferred writes adds its bytes here
  // (Booster::reserve_async_save counts what a save copies).
  void count_host_copies(int64_t* bytes) { copied_bytes_ = bytes; }

 protected:
  // Runs `write` now, or queues it for the background writer while writes are deferred.
  void write_or_defer(std::function<void()> write);
  // World rank 0 only: a write that needs every rank's files of this save in (an index of parts
  // written by several ranks). Now, when writes are not deferred (the caller has synchronised);
  // else the background writer runs it once every rank's writer has finished.
  void write_after_every_rank(std::function<void()> write);
  // `tensor` in host memory, contiguous. When writes are deferred it is always a copy (training
  // goes on changing the original), pinned when the save is from a CUDA device.
  torch::Tensor host_copy(const torch::Tensor& tensor) const;
  using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;
  NamedTensors host_copies(NamedTensors state) const;
  bool writes_deferred() const { return deferred_ != nullptr; }

  bool is_writer() const;
  void barrier() const;
  // The largest file of a sharded set, in bytes (0: one file); throws for a size that is not positive.
  static int64_t max_shard_bytes(const SaveOptions& options);
  // The plain numbers of a state (learning rates, loss scaler, scheduler) as a JSON object.
  static std::map<std::string, double> read_number_map(const std::string& path);
  static void write_number_map(const std::string& path, const std::map<std::string, double>& values);
  std::shared_ptr<dist::ProcessGroup> world_;

 private:
  detail::DeferredWrites* deferred_ = nullptr;
  int64_t* copied_bytes_ = nullptr;
};

}  // namespace colo
