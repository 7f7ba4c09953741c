#include "compute_threads.h"

#include <dlfcn.h>
#include <sched.h>
#include <torch/torch.h>

#include <algorithm>
#include <thread>

namespace train_vit {

int available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

void set_compute_threads(int threads) {
  torch::set_num_threads(threads);
  // Looked up at run time: builds whose LibTorch uses MKL or no OpenBLAS lack the symbol.
  using SetThreads = void (*)(int);
  if (auto* openblas_set_num_threads = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    openblas_set_num_threads(threads);
  }
}

}  // namespace train_vit
