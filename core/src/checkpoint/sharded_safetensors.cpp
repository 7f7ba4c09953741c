#include <colo/checkpoint/atomic_file.h>
#include <colo/checkpoint/finite_check.h>
#include <colo/checkpoint/sharded_safetensors.h>

#include <colo/files/files.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <set>

namespace colo::checkpoint {

namespace {

int64_t nbytes(const PendingTensor& t) {
  int64_t numel = 1;
  for (auto d : t.shape) numel *= d;
  return numel * static_cast<int64_t>(c10::elementSize(t.dtype));
}

// <dir>/<base>.safetensors, the set's one file when it has no index; an error when there is none.
std::string single_file_of(const std::string& dir, const std::string& base) {
  const auto single = files::join(dir, base + ".safetensors");
  if (!files::exists(single)) {
    throw CheckpointError(fmt::format("{}: no {}.safetensors or {}.safetensors.index.json; is this a colo checkpoint "
                                      "directory?",
                                      dir, base, base));
  }
  return single;
}

// The index's name → file map, validated.
std::map<std::string, std::string> read_weight_map(const std::string& index_file) {
  nlohmann::json index;
  try {
    std::ifstream in(index_file);
    index = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw CheckpointError(fmt::format("{}: not a valid JSON index ({})", index_file, e.what()));
  }
  if (!index.contains("weight_map") || !index["weight_map"].is_object()) {
    throw CheckpointError(fmt::format("{}: the index has no \"weight_map\" object", index_file));
  }
  std::map<std::string, std::string> map;
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string()) throw CheckpointError(fmt::format("{}: weight_map['{}'] is not a file name", index_file, name));
    map.emplace(name, file.get<std::string>());
  }
  return map;
}

std::string index_path(const std::string& dir, const std::string& base) {
  return files::join(dir, base + ".safetensors.index.json");
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// "<base>-<i>-of-<n>.safetensors": a shard of `base`'s set, of this save or an earlier one.
bool is_shard_of(const std::string& name, const std::string& base) {
  const std::string prefix = base + "-", suffix = ".safetensors";
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return false;
  }
  const std::string middle = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  const auto of = middle.find("-of-");
  return of != std::string::npos && all_digits(middle.substr(0, of)) && all_digits(middle.substr(of + 4));
}

// An earlier save into `dir` may have split `base` into another number of shards: its files,
// which the new index does not name, would otherwise stay behind as dead weight. Removed only
// after the new set is complete, so a crash midway leaves the old files, never a gap.
void remove_stale_shards(const std::string& dir, const std::string& base, const std::set<std::string>& keep) {
  for (const auto& name : files::list_directory(dir)) {
    if (is_shard_of(name, base) && keep.count(name) == 0) files::remove(files::join(dir, name));
  }
}

}  // namespace

void save_safetensors_set(const std::string& dir, const std::string& base, const NamedTensors& tensors,
                          int64_t max_shard_bytes, const std::map<std::string, std::string>& metadata) {
  std::vector<PendingTensor> pending;
  pending.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) {
    if (!tensor.defined()) throw CheckpointError(fmt::format("{}: tensor '{}' is undefined", dir, name));
    pending.push_back({name, tensor.scalar_type(), tensor.sizes().vec(), [t = tensor] { return t.detach(); }});
  }
  save_safetensors_set(dir, base, pending, max_shard_bytes, metadata);
}

void save_safetensors_set(const std::string& dir, const std::string& base, const std::vector<PendingTensor>& tensors,
                          int64_t max_shard_bytes, const std::map<std::string, std::string>& metadata) {
  files::create_directories(dir);
  // Greedy packing in the given order keeps a layer's tensors together in one shard.
  std::vector<std::vector<PendingTensor>> shards(1);
  std::vector<int64_t> shard_bytes(1, 0);
  for (const auto& entry : tensors) {
    const int64_t size = nbytes(entry);
    if (max_shard_bytes > 0 && shard_bytes.back() > 0 && shard_bytes.back() + size > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes.push_back(0);
    }
    shards.back().push_back(entry);
    shard_bytes.back() += size;
  }
  if (shards.size() == 1) {
    write_safetensors(files::join(dir, base + ".safetensors"), shards[0], metadata);
    files::remove(index_path(dir, base));  // a stale index would shadow the single file
    remove_stale_shards(dir, base, {});
    return;
  }
  std::map<std::string, std::string> weight_map;
  int64_t total = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file = safetensors_part_name(base, static_cast<int>(i), static_cast<int>(shards.size()));
    write_safetensors(files::join(dir, file), shards[i], metadata);
    for (const auto& tensor : shards[i]) weight_map[tensor.name] = file;
    total += shard_bytes[i];
  }
  write_safetensors_index(dir, base, weight_map, total);
}

bool has_safetensors_set(const std::string& dir, const std::string& base) {
  return files::exists(index_path(dir, base)) || files::exists(files::join(dir, base + ".safetensors"));
}

std::vector<TensorInfo> list_safetensors_set(const std::string& dir, const std::string& base) {
  const std::string index_file = index_path(dir, base);
  if (!files::exists(index_file)) {
    const auto single = single_file_of(dir, base);
    return read_safetensors_header(single);
  }
  std::set<std::string> files_named;
  for (const auto& [name, file] : read_weight_map(index_file)) files_named.insert(file);
  std::vector<TensorInfo> infos;
  for (const auto& file : files_named) {
    const auto path = files::join(dir, file);
    if (!files::exists(path)) throw CheckpointError(fmt::format("{}: names {} but the file is missing", index_file, file));
    for (auto& info : read_safetensors_header(path)) infos.push_back(std::move(info));
  }
  return infos;
}

std::string safetensors_part_name(const std::string& base, int part, int parts) {
  return fmt::format("{}-{:05d}-of-{:05d}.safetensors", base, part + 1, parts);
}

void write_safetensors_index(const std::string& dir, const std::string& base,
                             const std::map<std::string, std::string>& weight_map, int64_t total_bytes) {
  nlohmann::json map = nlohmann::json::object();
  std::set<std::string> written;
  for (const auto& [name, file] : weight_map) {
    map[name] = file;
    written.insert(file);
  }
  nlohmann::json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", map}};
  atomic_write_file(index_path(dir, base), index.dump(2));
  files::remove(files::join(dir, base + ".safetensors"));
  remove_stale_shards(dir, base, written);
}

NamedTensors load_safetensors_set(const std::string& dir, const std::string& base,
                                  const std::function<bool(const std::string& name)>& wanted) {
  const std::string index_file = index_path(dir, base);
  if (!files::exists(index_file)) {
    const auto single = single_file_of(dir, base);
    auto tensors = read_safetensors(single, wanted).tensors;
    require_finite(tensors, single);
    return tensors;
  }
  std::map<std::string, std::set<std::string>> names_by_file;
  for (const auto& [name, file] : read_weight_map(index_file)) {
    if (wanted && !wanted(name)) continue;
    names_by_file[file].insert(name);
  }
  NamedTensors result;
  for (const auto& [file, names] : names_by_file) {
    const auto path = files::join(dir, file);
    if (!files::exists(path)) {
      throw CheckpointError(fmt::format("{}: names {} (and {} other tensors) but the file is missing", index_file,
                                        file, names.size() - 1));
    }
    auto shard = read_safetensors(path, [&names](const std::string& name) { return names.count(name) > 0; });
    require_finite(shard.tensors, path);
    for (const auto& name : names) {
      if (!shard.contains(name)) {
        throw CheckpointError(fmt::format("{}: the index places '{}' in {} but that file does not hold it",
                                          index_file, name, file));
      }
      result.emplace_back(name, shard.at(name));
    }
  }
  return result;
}

}  // namespace colo::checkpoint
