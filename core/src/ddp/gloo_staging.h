#pragma once

#include <c10/core/ScalarType.h>
#include <colo/dist/process_group.h>

namespace colo::ddp::detail {

// Gloo (the CPU build's backend) has no bfloat16 reductions or broadcasts in LibTorch 1.13
// ("Invalid scalar type"): such tensors travel as fp32 copies. Exact for broadcasts; for the
// averages it only adds precision. NCCL handles bf16 natively.
inline bool stage_in_fp32(const dist::ProcessGroup& group, c10::ScalarType dtype) {
  return group.backend() == dist::Backend::kGloo && dtype == c10::kBFloat16;
}

}  // namespace colo::ddp::detail
