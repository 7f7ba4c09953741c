#include "gemini_checkpoint_io.h"

#include <colo/checkpoint/sharded_safetensors.h>
#include <colo/engine/gemini_model.h>
#include <colo/engine/gemini_optimizer.h>
#include <colo/engine/gemini_state_streamer.h>
#include <colo/files/files.h>
#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace colo::plugins {
namespace {


CheckpointSetReader set_reader(const std::string& dir, const std::string& base) {
  CheckpointSetReader reader;
  reader.entries = checkpoint::list_safetensors_set(dir, base);
  reader.read = [dir, base](const std::set<std::string>& names) {
    if (names.empty()) return checkpoint::NamedTensors{};
    return checkpoint::load_safetensors_set(dir, base, [&names](const std::string& name) { return names.count(name) > 0; });
  };
  return reader;
}

}  // namespace

// Every rank makes every entry in order (the gathers are collectives); the writer writes them,
// chunk by chunk as they are gathered, or for a deferred (asynchronous) save from host copies of
// them all, taken now.
void GeminiCheckpointIO::save_pending(const std::string& dir, const std::string& base,
                                      const std::vector<checkpoint::PendingTensor>& pending,
                                      int64_t max_shard_bytes) {
  if (!is_writer()) {
    for (const auto& entry : pending) entry.values();
  } else if (writes_deferred()) {
    checkpoint::NamedTensors whole;
    for (const auto& entry : pending) whole.emplace_back(entry.name, host_copy(entry.values()));
    write_or_defer([dir, base, whole = std::move(whole), max_shard_bytes] {
      checkpoint::save_safetensors_set(dir, base, whole, max_shard_bytes, {{"format", "colo"}});
    });
  } else {
    checkpoint::save_safetensors_set(dir, base, pending, max_shard_bytes, {{"format", "colo"}});
  }
}

void GeminiCheckpointIO::save_model(ModelWrapper& model, const std::string& dir, const SaveOptions& options) {
  auto* gemini = dynamic_cast<GeminiModel*>(&model);
  if (!gemini) return CheckpointIO::save_model(model, dir, options);
  save_pending(dir, "model", gemini->pending_full_state(), max_shard_bytes(options));
  barrier();
}

void GeminiCheckpointIO::load_model(ModelWrapper& model, const std::string& dir) {
  auto* gemini = dynamic_cast<GeminiModel*>(&model);
  if (!gemini) return CheckpointIO::load_model(model, dir);
  gemini->load_full_state(set_reader(dir, "model"));
}

void GeminiCheckpointIO::save_optimizer(OptimizerWrapper& optimizer, const std::string& dir,
                                        const SaveOptions& options) {
  auto* gemini = dynamic_cast<GeminiOptimizer*>(&optimizer);
  if (!gemini) return CheckpointIO::save_optimizer(optimizer, dir, options);
  // The chunks' state streamed as before; the companions' (delayed float8 scaling: a few KB) beside it.
  auto pending = gemini->pending_full_state();
  auto companions = optimizer.companion_state();
  for (const auto& [name, tensor] : companions.tensors) {
    pending.push_back({name, tensor.scalar_type(), tensor.sizes().vec(), [tensor] { return tensor; }});
  }
  save_pending(dir, "optimizer", pending, max_shard_bytes(options));
  if (is_writer()) {
    auto scalars = gemini->full_state_scalars();
    for (const auto& [name, value] : companions.scalars) scalars[name] = value;
    write_or_defer([dir, scalars] { write_number_map(files::join(dir, "optimizer.json"), scalars); });
  }
  barrier();
}

void GeminiCheckpointIO::load_optimizer(OptimizerWrapper& optimizer, const std::string& dir) {
  auto* gemini = dynamic_cast<GeminiOptimizer*>(&optimizer);
  if (!gemini) return CheckpointIO::load_optimizer(optimizer, dir);
  auto reader = set_reader(dir, "optimizer");
  // The companions' entries (and delayed float8 scaling's, claimed or not) read whole and checked
  // first; the chunks' state streams from a reader that no longer lists them.
  std::set<std::string> companion_names;
  std::vector<checkpoint::TensorInfo> chunk_entries;
  for (const auto& entry : reader.entries) {
    const bool companion = optimizer.is_companion_entry(entry.name);
    if (companion) companion_names.insert(entry.name);
    else chunk_entries.push_back(entry);
  }
  OptimizerWrapper::FullState stored;
  stored.tensors = reader.read(companion_names);
  stored.scalars = read_number_map(files::join(dir, "optimizer.json"));
  auto [rest, load_companions] = optimizer.split_companion_state(stored);
  reader.entries = std::move(chunk_entries);
  gemini->load_full_state(reader, rest.scalars);
  load_companions();
}

}  // namespace colo::plugins
