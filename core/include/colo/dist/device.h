#pragma once

#include <c10/core/Device.h>

namespace colo::dist {

struct Environment;

// The device a rank computes on: cuda:<local_rank> when this LibTorch has CUDA and the machine
// has GPUs (the device is also made current), the CPU otherwise. Throws when there are fewer
// GPUs than local ranks, naming both counts.
c10::Device select_device(const Environment& env);

}  // namespace colo::dist
