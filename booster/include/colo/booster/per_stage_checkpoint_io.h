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
class PerStageCheckpointIO : public CheckpointIO {
 public:
  struct Part {
    bool writer = false;  // this rank writes part `index`
    int index = 0;
    int count = 1;
    // Canonical names of the parameters and buffers this rank holds: what it loads.
    std::set<std::string> names;
    // Tensor parallelism: the parameters split over `tp` and how (LayerStack::canonical_shard_cuts:
    // 1D splits as one cut, 2D blocks as two). Saving gathers each split tensor (and its optimizer
    // state) over the group, one tensor at a time as the writer writes it (the writer's tp peers
    // join each gather); loading keeps this rank's piece.
    std::shared_ptr<dist::ProcessGroup> tp;
    std::map<std::string, std::vector<nn::ShardSpec>> cuts;
    bool writer_tp_peer = false;  // this rank's tp group holds the writer (it joins the gathers)
  };
  PerStageCheckpointIO(std::shared_ptr<dist::ProcessGroup> world, Part part);

  // The rank's part (set by the plugin once boost() has decided who holds what).
  void set_part(Part part) { part_ = std::move(part); }

  void save_model(ModelWrapper& model, const std::string& dir, const SaveOptions& options = {}) override;
  void load_model(ModelWrapper& model, const std::string& dir) override;
  // This part's entries, sliced as load_model slices them (on tensors without storage).
  void check_model(const ModelWrapper& model, const std::string& dir) override;
  void save_optimizer(OptimizerWrapper& optimizer, const std::string& dir, const SaveOptions& options = {}) override;
  void load_optimizer(OptimizerWrapper& optimizer, const std::string& dir) override;

 private:
  // `param_of` names the parameter an entry of a state belongs to.
  using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;
  using ParamOf = std::string (*)(const std::string&);
  // This rank's pieces of full tensors, for the entries that tensor parallelism split.
  NamedTensors sliced(NamedTensors state, ParamOf param_of) const;
  // Writes this rank's part of the set `base` (if it is a writer; split tensors gathered over tp
  // one at a time) and, on rank 0, the index.
  void save_parts(const std::string& dir, const std::string& base, const NamedTensors& tensors, ParamOf param_of);

  Part part_;
  int64_t saves_ = 0;  // numbers each save's store keys (every rank saves in the same order)
};

}  // namespace colo
