#include <colo/checkpoint/safetensors.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>

#include <colo/checkpoint/atomic_file.h>

// safetensors stores every number little-endian; colo copies tensor bytes verbatim.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "colo's safetensors I/O assumes a little-endian host");

namespace colo::checkpoint {
namespace {

using Json = nlohmann::ordered_json;  // keeps the header's order, which is the file's order

constexpr const char* kMetadataKey = "__metadata__";
// The Rust reference implementation refuses larger headers; so does colo, before allocating.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

struct DtypeInfo {
  const char* name;
  torch::ScalarType type;
  std::uint64_t itemsize;
};

constexpr std::array<DtypeInfo, 10> kDtypes{{
    {"F64", torch::kFloat64, 8},
    {"F32", torch::kFloat32, 4},
    {"F16", torch::kFloat16, 2},
    {"BF16", torch::kBFloat16, 2},
    {"I64", torch::kInt64, 8},
    {"I32", torch::kInt32, 4},
    {"I16", torch::kInt16, 2},
    {"I8", torch::kInt8, 1},
    {"U8", torch::kUInt8, 1},
    {"BOOL", torch::kBool, 1},
}};

std::string supported_dtype_list() {
  std::string list;
  for (const auto& d : kDtypes) list += (list.empty() ? "" : ", ") + std::string(d.name);
  return list;
}

const DtypeInfo* find_dtype(const std::string& name) {
  for (const auto& d : kDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

std::string format_list(const std::vector<std::uint64_t>& values) {
  std::string text = "[";
  for (std::size_t i = 0; i < values.size(); ++i) text += (i ? ", " : "") + std::to_string(values[i]);
  return text + "]";
}

// One header entry, validated but not yet read.
struct Entry {
  std::string name;
  const DtypeInfo* dtype;
  std::vector<std::int64_t> shape;
  std::uint64_t begin;
  std::uint64_t end;
};

class HeaderParser {
 public:
  HeaderParser(const std::string& path, std::uint64_t data_size) : path_(path), data_size_(data_size) {}

  [[noreturn]] void fail(const std::string& what) const { throw CheckpointError(path_ + ": " + what); }

  std::vector<std::uint64_t> unsigned_array(const Json& value, const std::string& tensor, const char* field) const {
    if (!value.is_array()) fail("tensor '" + tensor + "' field '" + field + "' is not an array");
    std::vector<std::uint64_t> out;
    for (const auto& v : value) {
      if (!v.is_number_unsigned()) {
        fail("tensor '" + tensor + "' field '" + field + "' holds " + v.dump() +
             ", not a non-negative integer; the header is corrupt");
      }
      out.push_back(v.get<std::uint64_t>());
    }
    return out;
  }

  Entry parse_entry(const std::string& name, const Json& value) const {
    if (!value.is_object()) fail("tensor '" + name + "' header entry is not a JSON object");
    for (const char* field : {"dtype", "shape", "data_offsets"}) {
      if (!value.contains(field)) fail("tensor '" + name + "' header entry has no '" + field + "' field");
    }
    const Json& dtype_json = value.at("dtype");
    if (!dtype_json.is_string()) fail("tensor '" + name + "' dtype is " + dtype_json.dump() + ", not a string");
    const auto dtype_name = dtype_json.get<std::string>();
    const DtypeInfo* dtype = find_dtype(dtype_name);
    if (dtype == nullptr) {
      fail("tensor '" + name + "' has dtype '" + dtype_name + "', which colo does not support (supported: " +
           supported_dtype_list() + ")");
    }

    const auto dims = unsigned_array(value.at("shape"), name, "shape");
    std::uint64_t bytes = dtype->itemsize;
    bool overflow = false;
    std::vector<std::int64_t> shape;
    for (auto d : dims) {
      if (d > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) overflow = true;
      overflow = overflow || __builtin_mul_overflow(bytes, d, &bytes);
      shape.push_back(static_cast<std::int64_t>(d));
    }
    if (overflow) fail("tensor '" + name + "' shape " + format_list(dims) + " is too large; the header is corrupt");

    const auto offsets = unsigned_array(value.at("data_offsets"), name, "data_offsets");
    if (offsets.size() != 2) {
      fail("tensor '" + name + "' data_offsets " + format_list(offsets) + " must be two numbers [begin, end]");
    }
    const std::uint64_t begin = offsets[0];
    const std::uint64_t end = offsets[1];
    if (end < begin) fail("tensor '" + name + "' data_offsets " + format_list(offsets) + " end before they begin");
    if (end > data_size_) {
      fail("tensor '" + name + "' data_offsets " + format_list(offsets) + " extend past the end of the data region (" +
           std::to_string(data_size_) + " bytes); the file is truncated or corrupt");
    }
    if (end - begin != bytes) {
      fail("tensor '" + name + "' data_offsets " + format_list(offsets) + " do not match shape " + format_list(dims) +
           " of " + dtype->name + " (" + std::to_string(bytes) + " bytes); the file is truncated or corrupt");
    }
    return Entry{name, dtype, std::move(shape), begin, end};
  }

  std::map<std::string, std::string> parse_metadata(const Json& value) const {
    if (!value.is_object()) fail(std::string("'") + kMetadataKey + "' is not a JSON object of strings");
    std::map<std::string, std::string> metadata;
    for (const auto& [key, v] : value.items()) {
      if (!v.is_string()) {
        fail(std::string("'") + kMetadataKey + "' entry '" + key + "' is " + v.dump() + ", not a string");
      }
      metadata.emplace(key, v.get<std::string>());
    }
    return metadata;
  }

  // Tensors may sit in any order, but no byte may belong to two of them.
  void check_no_overlap(std::vector<const Entry*> entries) const {
    std::sort(entries.begin(), entries.end(), [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
    const Entry* previous = nullptr;
    for (const Entry* e : entries) {
      if (e->begin == e->end) continue;  // empty tensors own no bytes
      if (previous != nullptr && e->begin < previous->end) {
        fail("tensors '" + previous->name + "' " + format_list({previous->begin, previous->end}) + " and '" + e->name +
             "' " + format_list({e->begin, e->end}) + " have overlapping data_offsets; the file is corrupt");
      }
      previous = e;
    }
  }

 private:
  std::string path_;
  std::uint64_t data_size_;
};

std::uint64_t read_u64_le(const unsigned char* bytes) {
  std::uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}

}  // namespace

const torch::Tensor& SafetensorsFile::at(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  throw std::out_of_range("safetensors file has no tensor '" + name + "'");
}

bool SafetensorsFile::contains(const std::string& name) const {
  return std::any_of(tensors.begin(), tensors.end(), [&](const auto& entry) { return entry.first == name; });
}

std::string safetensors_dtype_name(torch::ScalarType dtype) {
  for (const auto& d : kDtypes)
    if (d.type == dtype) return d.name;
  throw CheckpointError(std::string("dtype ") + c10::toString(dtype) +
                        " cannot be stored in safetensors by colo (supported: " + supported_dtype_list() + ")");
}

namespace {

// A file's validated header, the stream positioned after it.
struct ParsedHeader {
  std::ifstream in;
  std::uint64_t data_start = 0;
  std::vector<Entry> entries;
  std::map<std::string, std::string> metadata;
};

ParsedHeader parse_header(const std::string& path) {
  // stat, not std::filesystem: see atomic_file.cpp.
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    throw CheckpointError(path + (errno == ENOENT ? ": no such file" : ": cannot stat: " + std::string(std::strerror(errno))));
  }
  if (!S_ISREG(info.st_mode)) throw CheckpointError(path + ": not a regular file");
  const auto file_size = static_cast<std::uint64_t>(info.st_size);

  ParsedHeader parsed;
  auto& in = parsed.in;
  in.open(path, std::ios::binary);
  if (!in) throw CheckpointError(path + ": cannot open for reading: " + std::strerror(errno));
  if (file_size < 8) {
    throw CheckpointError(path + ": file is " + std::to_string(file_size) +
                          " bytes, too short to hold the 8-byte header length; it is not a safetensors file or is "
                          "truncated");
  }
  unsigned char length_bytes[8];
  in.read(reinterpret_cast<char*>(length_bytes), 8);
  const std::uint64_t header_size = read_u64_le(length_bytes);
  if (header_size > kMaxHeaderBytes) {
    throw CheckpointError(path + ": header length " + std::to_string(header_size) + " is over the format's limit of " +
                          std::to_string(kMaxHeaderBytes) + " bytes; it is not a safetensors file or is corrupt");
  }
  if (header_size > file_size - 8) {
    throw CheckpointError(path + ": header length " + std::to_string(header_size) + " does not fit in the file (" +
                          std::to_string(file_size) + " bytes); it is not a safetensors file or is truncated");
  }
  std::string header_text(header_size, '\0');
  in.read(header_text.data(), static_cast<std::streamsize>(header_size));
  if (!in) throw CheckpointError(path + ": reading the header failed");

  Json header;
  try {
    header = Json::parse(header_text);
  } catch (const Json::parse_error& e) {
    throw CheckpointError(path + ": header is not valid JSON (" + e.what() + "); the file is corrupt");
  }
  if (!header.is_object()) throw CheckpointError(path + ": header is not a JSON object; the file is corrupt");

  parsed.data_start = 8 + header_size;
  HeaderParser parser(path, file_size - parsed.data_start);
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) {
      parsed.metadata = parser.parse_metadata(value);
    } else {
      parsed.entries.push_back(parser.parse_entry(key, value));
    }
  }
  std::vector<const Entry*> pointers;
  for (const auto& e : parsed.entries) pointers.push_back(&e);
  parser.check_no_overlap(std::move(pointers));
  return parsed;
}

}  // namespace

NamedTensors meta_tensors(const std::vector<TensorInfo>& entries) {
  NamedTensors out;
  out.reserve(entries.size());
  for (const auto& e : entries) {
    out.emplace_back(e.name, torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype).device(torch::kMeta)));
  }
  return out;
}

std::vector<TensorInfo> read_safetensors_header(const std::string& path) {
  const auto parsed = parse_header(path);
  std::vector<TensorInfo> infos;
  for (const auto& e : parsed.entries) infos.push_back({e.name, e.dtype->type, e.shape});
  return infos;
}

SafetensorsFile read_safetensors(const std::string& path, const std::function<bool(const std::string& name)>& wanted) {
  auto parsed = parse_header(path);
  auto& in = parsed.in;
  const auto data_start = parsed.data_start;
  const auto& entries = parsed.entries;
  SafetensorsFile result;
  result.metadata = std::move(parsed.metadata);
  result.tensors.reserve(entries.size());
  for (const auto& e : entries) {
    if (wanted && !wanted(e.name)) continue;
    auto tensor = torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype->type));
    const std::uint64_t bytes = e.end - e.begin;
    if (bytes > 0) {
      in.seekg(static_cast<std::streamoff>(data_start + e.begin));
      in.read(static_cast<char*>(tensor.data_ptr()), static_cast<std::streamsize>(bytes));
      if (!in) throw CheckpointError(path + ": reading the data of tensor '" + e.name + "' failed");
    }
    result.tensors.emplace_back(e.name, std::move(tensor));
  }
  return result;
}

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<PendingTensor> pending;
  pending.reserve(tensors.size());
  for (const auto& entry : tensors) {
    const auto& name = entry.first;
    const auto& tensor = entry.second;
    if (!tensor.defined()) throw CheckpointError(path + ": tensor '" + name + "' is undefined");
    if (tensor.layout() != torch::kStrided) {
      throw CheckpointError(path + ": tensor '" + name + "' is not dense (sparse tensors cannot be saved)");
    }
    // One tensor at a time on the CPU: a GPU model is never copied out whole.
    pending.push_back({name, tensor.scalar_type(), tensor.sizes().vec(), [&tensor] { return tensor.detach(); }});
  }
  write_safetensors(path, pending, metadata);
}

void write_safetensors(const std::string& path, const std::vector<PendingTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::set<std::string> names;
  std::uint64_t offset = 0;
  for (const auto& tensor : tensors) {
    const auto& name = tensor.name;
    if (name == kMetadataKey) throw CheckpointError(path + ": '" + name + "' is reserved and cannot name a tensor");
    if (!names.insert(name).second) throw CheckpointError(path + ": tensor name '" + name + "' appears twice");
    std::string dtype;
    try {
      dtype = safetensors_dtype_name(tensor.dtype);
    } catch (const CheckpointError& e) {
      throw CheckpointError(path + ": tensor '" + name + "': " + e.what());
    }
    int64_t numel = 1;
    for (const auto d : tensor.shape) numel *= d;
    const auto bytes = static_cast<std::uint64_t>(numel) * c10::elementSize(tensor.dtype);
    header[name] = {{"dtype", dtype}, {"shape", tensor.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }

  std::string header_text;
  try {
    header_text = header.dump();
  } catch (const Json::type_error& e) {
    throw CheckpointError(path + ": a tensor name or metadata string is not valid UTF-8 (" + e.what() + ")");
  }
  // Padding keeps the data region 8-byte aligned for readers that map the file.
  header_text.append((8 - header_text.size() % 8) % 8, ' ');

  atomic_write_file(path, [&](std::ostream& out) {
    unsigned char length_bytes[8];
    std::uint64_t length = header_text.size();
    for (auto& b : length_bytes) {
      b = static_cast<unsigned char>(length & 0xff);
      length >>= 8;
    }
    out.write(reinterpret_cast<const char*>(length_bytes), 8);
    out.write(header_text.data(), static_cast<std::streamsize>(header_text.size()));
    for (const auto& tensor : tensors) {
      const auto values = tensor.values();
      if (!values.defined() || values.scalar_type() != tensor.dtype || values.sizes().vec() != tensor.shape) {
        throw CheckpointError(fmt::format("{}: tensor '{}' was announced as {} {} but its values are {}", path,
                                          tensor.name, safetensors_dtype_name(tensor.dtype), fmt::join(tensor.shape, "x"),
                                          values.defined() ? fmt::format("{} {}", c10::toString(values.scalar_type()),
                                                                         fmt::join(values.sizes().begin(), values.sizes().end(), "x"))
                                                           : std::string("undefined")));
      }
      if (values.numel() == 0) continue;
      const auto cpu = values.to(torch::kCPU).contiguous();
      out.write(static_cast<const char*>(cpu.data_ptr()),
                static_cast<std::streamsize>(cpu.numel() * cpu.element_size()));
    }
  });
}

}  // namespace colo::checkpoint
