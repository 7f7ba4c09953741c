#include "node_capacity.h"

#include <dirent.h>
#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <cstring>

namespace colo::launcher {
namespace {

int affinity_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<int>(online) : 1;
}

// /dev/nvidia<N>, one per GPU (besides nvidiactl, nvidia-uvm, ... which are not GPUs).
int nvidia_device_files() {
  DIR* dev = ::opendir("/dev");
  if (dev == nullptr) return 0;
  int count = 0;
  while (const dirent* entry = ::readdir(dev)) {
    const char* name = entry->d_name;
    if (std::strncmp(name, "nvidia", 6) != 0 || name[6] == '\0') continue;
    bool digits = true;
    for (const char* p = name + 6; *p != '\0'; ++p)
      digits = digits && std::isdigit(static_cast<unsigned char>(*p));
    if (digits) ++count;
  }
  ::closedir(dev);
  return count;
}

}  // namespace

int visible_gpus(int device_files, const char* cuda_visible_devices) {
  if (device_files <= 0 || cuda_visible_devices == nullptr) return std::max(0, device_files);
  // Entries are indices or GPU-/MIG- UUIDs; CUDA stops at the first entry it cannot use, and a
  // negative index is the conventional way to hide every GPU.
  int listed = 0;
  for (const auto& entry : split_devices(cuda_visible_devices)) {
    if (entry.empty() || entry[0] == '-') break;
    ++listed;
  }
  return std::min(listed, device_files);
}

std::vector<std::string> split_devices(const char* list) {
  std::vector<std::string> devices;
  if (list == nullptr) return devices;
  std::string item;
  for (const char* c = list;; ++c) {
    if (*c == ',' || *c == '\0') {
      devices.push_back(item);
      item.clear();
      if (*c == '\0') break;
    } else {
      item += *c;
    }
  }
  return devices;
}

NodeCapacity node_capacity() {
  NodeCapacity capacity;
  capacity.cpu_cores = affinity_cores();
  capacity.gpus = visible_gpus(nvidia_device_files(), std::getenv("CUDA_VISIBLE_DEVICES"));
  return capacity;
}

std::optional<std::string> oversubscription_warning(int nproc, const NodeCapacity& capacity) {
  if (capacity.gpus > 0 && nproc > capacity.gpus) {
    return fmt::format(
        "colo-run: warning: {} ranks but {} GPU{} visible (/dev/nvidia*, CUDA_VISIBLE_DEVICES): "
        "ranks would share a "
        "GPU, which NCCL refuses; use --nproc-per-node {}",
        nproc, capacity.gpus, capacity.gpus == 1 ? "" : "s", capacity.gpus);
  }
  if (nproc > capacity.cpu_cores) {
    return fmt::format(
        "colo-run: warning: {} ranks but {} CPU core{} available (colo-run's affinity mask): the "
        "ranks will share "
        "cores and each run slower; use --nproc-per-node {} or fewer for speed",
        nproc, capacity.cpu_cores, capacity.cpu_cores == 1 ? "" : "s", capacity.cpu_cores);
  }
  return std::nullopt;
}

}  // namespace colo::launcher
