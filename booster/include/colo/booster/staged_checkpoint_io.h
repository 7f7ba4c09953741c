#pragma once

#include <colo/booster/checkpoint_io.h>
#include <colo/nn/shard_spec.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>

namespace colo {

// Checkpoints of a model whose ranks hold different layers (pipeline stages): each part is
// written by the one rank chosen for it (the stage's first data-parallel replica), so no rank
// ever gathers the whole model, and each rank reads only its own layers' tensors. On disk it is a
// sharded safetensors set like any other (docs/checkpoint_format.md): part i of n in
// model-<i+1>-of-<n>.safetensors, an index naming each tensor's file, so a checkpoint saved by a
// pipeline of any size loads under every plugin and layout, and back.
//
// Every rank of the world calls each method (saving is collective: full_state() may gather over
// the data-parallel group, and the parts' names meet in the index through the job's store).
class StagedCheckpointIO : public CheckpointIO {
 public:
  struct Part {
    bool writer = false;  // this rank writes part `index`
    int index = 0;
    int count = 1;
    // Canonical names of the parameters and buffers this rank holds: what it loads.
    std::set<std::string> names;
    // Tensor parallelism: the parameters split over `tp` and how. Saving gathers each split tensor
    // (and its optimizer state) over the group, one tensor at a time; loading keeps this rank's piece.
    std::shared_ptr<dist::ProcessGroup> tp;
    std::map<std::string, nn::ShardSpec> specs;
  };
  StagedCheckpointIO(std::shared_ptr<dist::ProcessGroup> world, Part part);

  // The rank's part (set by the plugin once boost() has decided who holds what).
  void set_part(Part part) { part_ = std::move(part); }

  void save_model(ModelWrapper& model, const std::string& dir, const SaveOptions& options = {}) override;
  void load_model(ModelWrapper& model, const std::string& dir) override;
  void save_optimizer(OptimizerWrapper& optimizer, const std::string& dir, const SaveOptions& options = {}) override;
  void load_optimizer(OptimizerWrapper& optimizer, const std::string& dir) override;

 private:
  // Full tensors for the pieces that tensor parallelism split (collective over tp), and the
  // reverse; `param_of` names the parameter an entry belongs to.
  using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;
  NamedTensors gathered(NamedTensors state, std::string (*param_of)(const std::string&)) const;
  NamedTensors sliced(NamedTensors state, std::string (*param_of)(const std::string&)) const;
  // Writes this rank's part of the set `base` (if it is a writer) and, on rank 0, the index.
  void save_parts(const std::string& dir, const std::string& base,
                  const std::vector<std::pair<std::string, torch::Tensor>>& tensors);

  Part part_;
  int64_t saves_ = 0;  // numbers each save's store keys (every rank saves in the same order)
};

}  // namespace colo
