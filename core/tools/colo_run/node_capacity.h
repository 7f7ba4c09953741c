#pragma once

#include <optional>
#include <string>
#include <vector>

// How many ranks this node can run side by side without sharing: the CPU cores colo-run may use
// and the GPUs the ranks will see. colo-run links no LibTorch (and no CUDA), so GPUs are counted
// from the device files the NVIDIA driver creates and CUDA_VISIBLE_DEVICES.
namespace colo::launcher {

struct NodeCapacity {
  int cpu_cores = 1;  // in colo-run's affinity mask (taskset, cgroup cpusets), not the machine's
  int gpus = 0;       // 0: no GPU, so the ranks run on CPUs
};

NodeCapacity node_capacity();

// The GPUs CUDA would show a process: `device_files` NVIDIA GPUs (/dev/nvidia0, /dev/nvidia1, ...)
// narrowed by CUDA_VISIBLE_DEVICES (nullptr: unset), whose list CUDA reads up to the first
// invalid entry ("", "-1": none).
int visible_gpus(int device_files, const char* cuda_visible_devices);

// The entries of a CUDA_VISIBLE_DEVICES list, as written (none for nullptr).
std::vector<std::string> split_devices(const char* list);

// One line for stderr when `nproc` ranks would share this node's GPUs or cores, saying what to
// change; nothing when they fit.
std::optional<std::string> oversubscription_warning(int nproc, const NodeCapacity& capacity);

}  // namespace colo::launcher
