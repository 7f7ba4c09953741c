#pragma once

namespace train_vit {

// CPUs this process may run on: its affinity mask, which honours cpusets (containers, taskset,
// SLURM), unlike std::thread::hardware_concurrency().
int available_cpus();

// Sets how many threads one rank computes with: LibTorch's intra-op pool and, where LibTorch
// does its matrix products through OpenBLAS's own thread pool (Debian's CPU build; LibTorch
// sizes only MKL's), OpenBLAS's pool too. Without the latter, every rank's OpenBLAS sizes its
// pool to all the node's cores, and ranks sharing a node oversubscribe them.
void set_compute_threads(int threads);

}  // namespace train_vit
