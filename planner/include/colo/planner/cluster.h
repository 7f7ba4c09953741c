#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace colo::planner {

// The collectives the plugins issue.
enum class Collective { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kSendRecv };
// "all_reduce", "all_gather", "reduce_scatter", "broadcast", "send_recv".
const char* to_string(Collective collective);
const std::vector<Collective>& all_collectives();

// A collective's cost on one link level: latency + moved bytes / bus bandwidth, where "moved
// bytes" follows nccl-tests' bus-bandwidth convention (collective_model.h), so that one
// bandwidth describes a link whatever the group size.
struct LinkConstants {
  double latency_s = 0;
  double bus_bandwidth_Bps = 0;  // bytes per second
};

// One level of the network: every collective's constants, where given, else the level's own.
struct LinkLevel {
  LinkConstants defaults;
  std::map<Collective, LinkConstants> per_collective;
  const LinkConstants& of(Collective collective) const;
};

// One accelerator (or CPU rank) of the cluster: what the analytic compute model and the
// optimizer/offload terms use when no measured profile is given, and the memory a layout must
// fit.
struct DeviceSpec {
  bool is_gpu = true;
  double memory_gib = 80;
  // Share of memory_gib a plan may fill (the allocator's fragmentation, the runtime's context).
  double usable_memory_fraction = 0.92;
  // Datasheet dense TFLOP/s by precision ("bf16", "fp16", "fp32", "fp8"): MFU's denominator.
  std::map<std::string, double> peak_tflops;
  // Analytic compute model: matrix products at peak × matmul_efficiency, the layers' other work
  // (norms, activations, residuals) at memory_bandwidth × memory_efficiency, plus a fixed
  // cost per layer pass (launches).
  double matmul_efficiency = 0.5;
  double memory_bandwidth_GBps = 2000;
  double memory_efficiency = 0.7;
  double layer_overhead_us = 20;
  // Adam on the device and on the host (offloaded state), per fp32 element of the shard stepped.
  double device_adam_ns_per_element = 0.02;
  double host_adam_ns_per_element = 1.0;
  // Host <-> device copies (pinned), per direction; 0 on CPU ranks (one memory).
  double host_device_GBps = 0;
  // Host memory of one node (offloaded state of all its ranks must fit).
  double host_memory_gib = 1024;
  // CPU ranks only: the cores of one node (0: a core per rank). Ranks that outnumber the cores
  // take turns on them, so each rank's compute (measured on a core of its own) takes
  // ranks / cores as long; see compute_slowdown().
  int cores_per_node = 0;
};

// A cluster file (docs/planning.md): nodes of gpus_per_node devices, two link levels.
struct ClusterSpec {
  std::string name;
  std::string source;  // the file it came from, or what made it
  int gpus_per_node = 8;
  DeviceSpec device;
  LinkLevel intra_node;
  // Between nodes: constants per network interface; a group with k ranks per node moves data
  // over min(k, nics_per_node) of them at once (NCCL's rings use every rank's own NIC), never
  // faster than intra_node.
  LinkLevel inter_node;
  int nics_per_node = 8;
  // Share of communication a plugin overlaps with computation that it actually hides (1: all of
  // it, as on GPUs with their own copy engines and spare SMs; near 0 on CPU ranks of one core,
  // where Gloo's threads take turns with the computation). Measured by colo-plan profile
  // --collectives.
  double overlap_efficiency = 0.9;
  // What a collective costs beyond its line (latency + bytes / bandwidth) when a rank waits on it
  // right after computing its input, as tensor parallelism's collectives are waited on: between
  // CPU ranks, Gloo's threads wake from the computation's idle spell (0.25-1.12 ms a call in
  // eleven runs on the development machine) where calls back to back find them awake. colo-plan profile
  // --collectives measures it as a chain of (matmuls, all-reduce) against the matmuls alone
  // (detail::synchronous_extra_seconds); 0 in the shipped GPU file (NCCL's kernels queue on the
  // stream behind the computation; nothing measured there says otherwise).
  double synchronous_extra_latency_s = 0;
  // Below `below_bytes` a collective reaches only `factor` of its bandwidth (NCCL's protocols
  // before they saturate the links); the first entry whose threshold a message is under applies.
  struct Derating {
    int64_t below_bytes = 0;
    double factor = 1;
  };
  std::vector<Derating> small_messages;
};

// How much longer a rank's compute takes than its profile (measured on a core of its own) says:
// ranks of a node / cores_per_node for CPU ranks that outnumber the cores, 1 otherwise.
double compute_slowdown(const ClusterSpec& cluster, int world_size);

// The path of a cluster file shipped with colo (planner/clusters/; installed to
// share/colo/clusters): beside the installed library, else in the source tree it was built from.
// Throws std::invalid_argument saying where it looked when it is in neither.
std::string shipped_cluster_file(const std::string& name = "h100_sxm_8gpu.json");

// Rough constants for `ranks` CPU ranks of one machine (Gloo over loopback, ~50 GFLOP/s per rank,
// no overlap), for a plan where nothing was measured; colo-plan profile --collectives measures
// the real ones.
ClusterSpec local_cpu_cluster(int ranks, double memory_gib_per_rank);

// Reads a cluster file. Throws PlannerFileError naming the file, line and field for malformed
// JSON, a missing or ill-typed field, a value out of range or an unknown field.
ClusterSpec read_cluster_file(const std::string& path);
ClusterSpec parse_cluster(const std::string& text, const std::string& source);
// The JSON form read_cluster_file() reads (colo-plan profile --collectives writes it).
std::string to_json(const ClusterSpec& cluster);

}  // namespace colo::planner
