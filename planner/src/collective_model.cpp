#include <colo/planner/collective_model.h>

#include <algorithm>
#include <cmath>

namespace colo::planner {

GroupPlacement tp_group(int tp, int gpus_per_node) { return {tp, std::max(1, std::min(tp, gpus_per_node))}; }

namespace {
GroupPlacement strided(int size, int stride, int gpus_per_node) {
  const int per_node = std::clamp(gpus_per_node / std::max(stride, 1), 1, std::max(size, 1));
  return {size, per_node};
}
}  // namespace

GroupPlacement pp_group(int pp, int tp, int gpus_per_node) { return strided(pp, tp, gpus_per_node); }
GroupPlacement dp_group(int dp, int pp, int tp, int gpus_per_node) { return strided(dp, pp * tp, gpus_per_node); }

double collective_seconds(const ClusterSpec& cluster, Collective collective, double bytes, const GroupPlacement& group) {
  const int n = group.size;
  if (n <= 1 || bytes <= 0) return 0.0;
  const double fraction = static_cast<double>(n - 1) / static_cast<double>(n);
  double moved = bytes;
  switch (collective) {
    case Collective::kAllReduce:
      moved = 2.0 * fraction * bytes;
      break;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
      moved = fraction * bytes;
      break;
    case Collective::kBroadcast:
    case Collective::kSendRecv:
      break;
  }
  const auto& intra = cluster.intra_node.of(collective);
  double bandwidth = intra.bus_bandwidth_Bps;
  double latency = intra.latency_s;
  if (group.spans_nodes()) {
    const auto& inter = cluster.inter_node.of(collective);
    const int links = std::max(1, std::min(group.per_node, cluster.nics_per_node));
    bandwidth = std::min(bandwidth, static_cast<double>(links) * inter.bus_bandwidth_Bps);
    latency = inter.latency_s * (1.0 + std::log2(static_cast<double>(group.nodes())));
  }
  // The derating applies to what one rank holds (the message NCCL's protocol sees).
  const double per_rank = collective == Collective::kAllGather || collective == Collective::kReduceScatter
                              ? bytes / static_cast<double>(n)
                              : bytes;
  for (const auto& d : cluster.small_messages) {
    if (per_rank < static_cast<double>(d.below_bytes)) {
      bandwidth *= d.factor;
      break;
    }
  }
  return latency + moved / bandwidth;
}

double synchronous_seconds(const ClusterSpec& cluster, Collective collective, double bytes, const GroupPlacement& group) {
  if (group.size <= 1 || bytes <= 0) return 0.0;
  return collective_seconds(cluster, collective, bytes, group) + cluster.synchronous_extra_latency_s;
}

double bucketed_seconds(const ClusterSpec& cluster, Collective collective, double bytes, double bucket_bytes,
                        const GroupPlacement& group) {
  if (group.size <= 1 || bytes <= 0) return 0.0;
  const double buckets = std::max(1.0, std::ceil(bytes / bucket_bytes));
  return buckets * collective_seconds(cluster, collective, bytes / buckets, group);
}

}  // namespace colo::planner
