#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <colo/checkpoint/checkpoint_error.h>

namespace colo::checkpoint {

// Name → tensor pairs in a meaningful order (file order, or a model's canonical order).
using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// The contents of one safetensors file (https://github.com/huggingface/safetensors):
// tensors in the order the header lists them, plus the free-form "__metadata__" strings.
struct SafetensorsFile {
  NamedTensors tensors;
  std::map<std::string, std::string> metadata;

  // The tensor called `name`; throws std::out_of_range naming it when the file has none.
  const torch::Tensor& at(const std::string& name) const;
  bool contains(const std::string& name) const;
};

// Reads a whole safetensors file into CPU tensors. Everything is validated before it is
// trusted: the file's size, the 8-byte little-endian header length, the header's JSON, each
// entry's dtype (F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL), shape and data_offsets (length ==
// numel × itemsize, inside the data region, no two tensors overlapping) and the metadata
// (a string → string map). Any violation throws CheckpointError naming the file, the tensor
// and what is wrong.
//
// With `wanted`, only the tensors it accepts are read (the header is validated whole): a pipeline
// stage reads its layers out of a whole model's file.
SafetensorsFile read_safetensors(const std::string& path,
                                 const std::function<bool(const std::string& name)>& wanted = nullptr);

// Writes `tensors` (any device and layout: each is copied to contiguous CPU memory as it is
// written) in the given order, atomically (see atomic_write_file). The header is padded with
// spaces to a multiple of 8 bytes, as the format recommends. Throws CheckpointError for an
// unsupported dtype, a duplicate or reserved name, or an I/O failure.
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// A tensor whose dtype and shape are known before its values are: the header is written first,
// then each `values()` is called in turn and written at once (a tensor gathered over the
// tensor-parallel ranks, say, so that no more than one is ever held whole).
struct PendingTensor {
  std::string name;
  torch::ScalarType dtype;
  std::vector<int64_t> shape;
  std::function<torch::Tensor()> values;
};

// write_safetensors for tensors made one at a time. A `values()` whose dtype or shape is not the
// one announced throws CheckpointError (and the file is not written).
void write_safetensors(const std::string& path, const std::vector<PendingTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// What a file holds of one tensor, without its values.
struct TensorInfo {
  std::string name;
  torch::ScalarType dtype;
  std::vector<int64_t> shape;
};

// The tensors a safetensors file holds, in header order, read and validated as read_safetensors
// does but without reading any values (a checkpoint loaded piece by piece is checked first).
std::vector<TensorInfo> read_safetensors_header(const std::string& path);

// The entries as tensors without storage (meta device), named and in order: what a check of
// names, shapes and dtypes needs (ModelWrapper::check_full_state) before anything is read.
NamedTensors meta_tensors(const std::vector<TensorInfo>& entries);

// The safetensors name of a dtype ("F32", "BF16", ...); throws CheckpointError for dtypes the
// format (as colo supports it) cannot hold.
std::string safetensors_dtype_name(torch::ScalarType dtype);

}  // namespace colo::checkpoint
