#pragma once

#include <torch/types.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace colo::zero {

// torch::empty({numel}, options), with a failure (GPU out of memory, host or pinned allocation
// refused) turned into a colo::zero::AllocationError that names what was being allocated, how
// much, where, and the option that would help: PyTorch's own message ("CUDA error: out of
// memory ... allocate_host_memory_slowpath") names none of them.
torch::Tensor allocate(int64_t numel, const torch::TensorOptions& options, const std::string& what,
                       const std::string& hint);

class AllocationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "1.50 GiB", "12.00 MiB", "512 B".
std::string format_bytes(int64_t bytes);

}  // namespace colo::zero
