#pragma once

#include <colo/planner/cluster.h>

#include <cstdint>

namespace colo::planner {

// Where a process group's ranks sit: `size` ranks, `per_node` of them on each node they use
// (size <= per_node: the group lives in one node).
struct GroupPlacement {
  int size = 1;
  int per_node = 1;
  bool spans_nodes() const { return size > per_node; }
  int nodes() const { return (size + per_node - 1) / per_node; }
};

// The group of one mesh axis: the mesh lays ranks out as (dp, pp, tp) with tp innermost
// (ProcessGroupMesh), so a tp group is `tp` neighbours, a pp group strides by tp and a dp group
// by tp × pp; a node holds gpus_per_node consecutive ranks.
GroupPlacement tp_group(int tp, int gpus_per_node);
GroupPlacement pp_group(int pp, int tp, int gpus_per_node);
GroupPlacement dp_group(int dp, int pp, int tp, int gpus_per_node);

// Seconds one collective takes (ring algorithms, the nccl-tests bus-bandwidth convention):
//   all_reduce of B bytes       latency + 2(n-1)/n · B / bw
//   all_gather, reduce_scatter  latency + (n-1)/n · B / bw   (B: the whole, gathered buffer)
//   broadcast                   latency + B / bw
//   send_recv (one message)     latency + B / bw
// with the intra-node constants for a group inside one node; for a group across nodes, the
// inter-node ones with bw = min(intra bw, min(per_node, nics) × per-NIC bw) and the latency of
// each node hop of a tree (latency × (1 + log2 nodes)). Small messages are derated as the cluster
// file says. 0 for a group of one.
double collective_seconds(const ClusterSpec& cluster, Collective collective, double bytes, const GroupPlacement& group);

// A collective the rank waits on as soon as it is issued, right after computing its input (tensor
// parallelism's): collective_seconds plus the cluster's synchronous_extra_latency_s (0 for a group
// of one or nothing to move).
double synchronous_seconds(const ClusterSpec& cluster, Collective collective, double bytes, const GroupPlacement& group);

// The same for `bytes` issued in buckets of at most `bucket_bytes` (every bucket pays the latency).
double bucketed_seconds(const ClusterSpec& cluster, Collective collective, double bytes, double bucket_bytes,
                        const GroupPlacement& group);

}  // namespace colo::planner
