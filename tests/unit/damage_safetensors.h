#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace colo::testing {

// Overwrites the 4 bytes of float32 element `element` of tensor `name` in the safetensors file
// `path` with a NaN, in place, leaving the file otherwise intact: what a flipped disk block or a
// checkpoint saved by a diverged run looks like to a loader.
inline void overwrite_with_nan(const std::string& path, const std::string& name, int64_t element) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  if (!file) throw std::runtime_error("cannot open " + path);
  unsigned char length_bytes[8];
  file.read(reinterpret_cast<char*>(length_bytes), 8);
  uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = header_length << 8 | length_bytes[i];
  std::string header(header_length, '\0');
  file.read(header.data(), static_cast<std::streamsize>(header_length));
  const auto entry = nlohmann::json::parse(header).at(name);
  if (entry.at("dtype") != "F32") throw std::runtime_error(name + " is not F32 in " + path);
  const auto offset =
      8 + header_length + entry.at("data_offsets").at(0).get<uint64_t>() + static_cast<uint64_t>(element) * 4;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  char bytes[4];
  std::memcpy(bytes, &nan, 4);  // safetensors is little-endian, as is every machine colo runs on
  file.seekp(static_cast<std::streamoff>(offset));
  file.write(bytes, 4);
  if (!file) throw std::runtime_error("cannot write " + path);
}

}  // namespace colo::testing
