#pragma once

#include <colo/dist/process_group.h>

#include <c10/core/Device.h>

#include <memory>

namespace colo::test {

// The world group of this distributed test run (created once in main.cpp, after colo-run has
// started every rank). Tests build meshes and subgroups from it.
std::shared_ptr<dist::ProcessGroup> world();

// Where this rank's tensors live: its GPU when the world runs on NCCL (the GPU machine), cuda:0 for
// every rank under COLO_BACKEND=gloo on a GPU machine (CUDA tensors over Gloo), the CPU with Gloo
// (CI). NCCL takes CUDA tensors only, so every tensor a test hands to a collective is created
// there.
c10::Device device();

}  // namespace colo::test
