#pragma once

#include <colo/checkpoint/safetensors.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace colo::checkpoint {

// A set of tensors saved under one base name in a directory, in the Hugging Face layout:
//   <dir>/<base>.safetensors                                   (one file), or
//   <dir>/<base>-00001-of-00003.safetensors ... + <dir>/<base>.safetensors.index.json
// The index ({"metadata": {"total_size": bytes}, "weight_map": {name: file}}) is written last,
// after every shard, so a reader never sees an index that names missing files. Every file is
// written atomically. max_shard_bytes = 0 means one file. What an earlier save of the same base
// left in `dir` in the other layout, or with another number of shards, is removed once the new
// set is complete.
void save_safetensors_set(const std::string& dir, const std::string& base, const NamedTensors& tensors,
                          int64_t max_shard_bytes = 0, const std::map<std::string, std::string>& metadata = {});
// The same for tensors made one at a time (write_safetensors' PendingTensor), in the given order:
// a set larger than memory (gemini's, gathered chunk by chunk) is written without ever being whole.
void save_safetensors_set(const std::string& dir, const std::string& base, const std::vector<PendingTensor>& tensors,
                          int64_t max_shard_bytes = 0, const std::map<std::string, std::string>& metadata = {});

// Whether `dir` holds a set with that base name (either layout).
bool has_safetensors_set(const std::string& dir, const std::string& base);

// Every tensor of a set (either layout) with its dtype and shape, read from the headers alone.
std::vector<TensorInfo> list_safetensors_set(const std::string& dir, const std::string& base);

// Reads a set written by save_safetensors_set (or by Hugging Face tools, or in parts). Throws
// CheckpointError naming the directory and what is missing or inconsistent, or naming the file
// and the tensor when a floating-point value is NaN or infinite (require_finite). With `wanted`, only
// the tensors it accepts are read, and only the files holding them are opened.
NamedTensors load_safetensors_set(const std::string& dir, const std::string& base,
                                  const std::function<bool(const std::string& name)>& wanted = nullptr);

// A set written in parts by several writers at once (each rank of a pipeline its stage's layers,
// so that none gathers the whole model): part i of n is the file safetensors_part_name(base, i,
// n), written by write_safetensors; once every part is in, one writer calls
// write_safetensors_index with every tensor's file. The result reads like any sharded set.
std::string safetensors_part_name(const std::string& base, int part, int parts);
// Writes <dir>/<base>.safetensors.index.json (atomically) naming each tensor's file, then removes
// what an earlier save of `base` left in `dir` that the index does not name (a single-file set,
// shards of another count).
void write_safetensors_index(const std::string& dir, const std::string& base,
                             const std::map<std::string, std::string>& weight_map, int64_t total_bytes);

}  // namespace colo::checkpoint
