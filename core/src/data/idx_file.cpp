#include <colo/data/dataset_error.h>
#include <colo/data/idx_file.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <string>
#include <vector>

#include "dataset_files.h"

namespace colo::data {
namespace {

// 0x08: the IDX type code of unsigned bytes, the only one the MNIST family uses.
constexpr uint8_t kUnsignedByte = 0x08;

uint32_t big_endian_u32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
}

}  // namespace

torch::Tensor read_idx_file(const std::string& path, int expected_ndims) {
  const std::vector<uint8_t> bytes = detail::read_file_bytes(path);
  const std::string name = path;
  const uint32_t expected_magic = kUnsignedByte << 8 | static_cast<uint32_t>(expected_ndims);
  if (bytes.size() < 4) {
    throw DatasetError(
        fmt::format("{}: truncated IDX file: {} bytes, fewer than its 4-byte magic number; "
                    "fetch or reinstall the file",
                    name, bytes.size()));
  }
  const uint32_t magic = big_endian_u32(bytes.data());
  if (magic != expected_magic) {
    throw DatasetError(fmt::format(
        "{}: bad magic number 0x{:08x}, expected 0x{:08x} (an IDX file of unsigned bytes with {} dimensions, "
        "e.g. {}); is this the right file?",
        name, magic, expected_magic, expected_ndims,
        expected_ndims == 1 ? "train-labels-idx1-ubyte" : "train-images-idx3-ubyte"));
  }
  const size_t header_bytes = 4 + 4 * static_cast<size_t>(expected_ndims);
  if (bytes.size() < header_bytes) {
    throw DatasetError(
        fmt::format("{}: truncated IDX header: {} bytes, but {} dimensions need a {}-byte header; "
                    "fetch or reinstall the file",
                    name, bytes.size(), expected_ndims, header_bytes));
  }
  std::vector<int64_t> sizes;
  size_t data_bytes = 1;
  for (int d = 0; d < expected_ndims; ++d) {
    sizes.push_back(big_endian_u32(bytes.data() + 4 + 4 * d));
    data_bytes *= static_cast<size_t>(sizes.back());
  }
  const size_t actual = bytes.size() - header_bytes;
  if (actual != data_bytes) {
    throw DatasetError(
        fmt::format("{}: {}: the header announces {} = {} data bytes, but {} follow it; fetch or reinstall the file",
                    name, actual < data_bytes ? "truncated IDX file" : "IDX file longer than its header says",
                    fmt::join(sizes, "x"), data_bytes, actual));
  }
  auto tensor = torch::empty(sizes, torch::kUInt8);
  if (data_bytes > 0) std::memcpy(tensor.data_ptr<uint8_t>(), bytes.data() + header_bytes, data_bytes);
  return tensor;
}

}  // namespace colo::data
