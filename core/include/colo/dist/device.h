#pragma once

#include <c10/core/Device.h>

namespace colo::dist {

struct Environment;

// The device a rank computes on: cuda:<local_rank> when this LibTorch has CUDA and the machine
// has GPUs (the device is also made current), the CPU otherwise; cuda:0 for every rank under
// COLO_BACKEND=gloo on a machine with GPUs (backend_choice.h; rank 0 says so once). Throws when
// there are fewer GPUs than local ranks, naming both counts, and when COLO_BACKEND asks for what
// this process cannot do.
c10::Device select_device(const Environment& env);

}  // namespace colo::dist
