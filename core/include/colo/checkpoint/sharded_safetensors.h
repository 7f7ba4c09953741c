#pragma once

#include <colo/checkpoint/safetensors.h>

#include <cstdint>
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

// Reads a set written by save_safetensors_set (or by Hugging Face tools). Throws CheckpointError
// naming the directory and what is missing or inconsistent, or naming the file and the tensor
// when a floating-point value is NaN or infinite (require_finite).
NamedTensors load_safetensors_set(const std::string& dir, const std::string& base);

// Whether `dir` holds a set with that base name (either layout).
bool has_safetensors_set(const std::string& dir, const std::string& base);

}  // namespace colo::checkpoint
