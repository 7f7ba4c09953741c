#pragma once

#include <torch/types.h>

#include <string>

namespace colo::data {

// Reads an IDX file of unsigned bytes (the MNIST family's format: magic 0x00 0x00 0x08 <ndims>,
// ndims big-endian uint32 sizes, then the bytes in row-major order) into a uint8 tensor of the
// sizes the header gives. A gzip-compressed file (recognised by its content, not its name) is
// decompressed. Throws DatasetError naming the file for: a missing or unreadable file, corrupt
// or truncated gzip data, a magic number other than 0x0000080<expected_ndims>, and data shorter
// or longer than the header announces.
torch::Tensor read_idx_file(const std::string& path, int expected_ndims);

}  // namespace colo::data
