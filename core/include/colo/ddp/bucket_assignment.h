#pragma once

#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace colo::ddp {

// The largest bucket cap (1 PiB; colo::kMaxMemoryBytes, every memory-size option's limit): a
// larger one buckets no differently, and its MiB would overflow int64_t bytes.
inline constexpr int64_t kMaxBucketCapBytes = int64_t{1} << 50;

// Groups parameters into gradient buckets, each to be all-reduced as one flat buffer.
//
// Parameters are visited in REVERSE order: backward produces gradients roughly from the last
// layer to the first, so reverse registration order approximates the order in which buckets
// become ready and lets the first all-reduce start while most of backward is still running.
// A bucket holds parameters of one dtype and device; it is closed as soon as it holds at least
// `bucket_cap_bytes` (so one parameter larger than the cap gets a bucket of its own).
// Buckets are returned in the order of their first parameter in that reverse walk, which is
// the order in which they are launched, identically on every rank.
//
// Returns, per bucket, indices into `params` (in the reverse order they were added).
// Throws std::invalid_argument for a non-positive cap or an undefined tensor.
std::vector<std::vector<std::size_t>> assign_buckets(const std::vector<torch::Tensor>& params,
                                                     int64_t bucket_cap_bytes);
// The same for parameters of one dtype and device, given by their element counts (memory plans,
// which have no tensors).
std::vector<std::vector<std::size_t>> assign_buckets(const std::vector<int64_t>& numels, int64_t element_size,
                                                     int64_t bucket_cap_bytes);

}  // namespace colo::ddp
