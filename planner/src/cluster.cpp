#include <colo/planner/cluster.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <dlfcn.h>

#include <algorithm>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "json_fields.h"

namespace colo::planner {
namespace {

using detail::ObjectReader;

LinkConstants read_constants(ObjectReader& in, const LinkConstants* fallback) {
  LinkConstants c;
  c.latency_s = in.number("latency_us", fallback ? std::optional<double>(fallback->latency_s * 1e6) : std::nullopt,
                          true) * 1e-6;
  c.bus_bandwidth_Bps =
      in.number("bus_bandwidth_GBps", fallback ? std::optional<double>(fallback->bus_bandwidth_Bps / 1e9) : std::nullopt) * 1e9;
  return c;
}

LinkLevel read_level(ObjectReader& in) {
  LinkLevel level;
  level.defaults = read_constants(in, nullptr);
  for (auto collective : all_collectives()) {
    if (auto sub = in.object(to_string(collective))) {
      level.per_collective[collective] = read_constants(*sub, &level.defaults);
      sub->finish();
    }
  }
  return level;
}

nlohmann::json level_json(const LinkLevel& level) {
  nlohmann::json j = {{"latency_us", level.defaults.latency_s * 1e6},
                      {"bus_bandwidth_GBps", level.defaults.bus_bandwidth_Bps / 1e9}};
  for (const auto& [collective, c] : level.per_collective) {
    j[to_string(collective)] = {{"latency_us", c.latency_s * 1e6}, {"bus_bandwidth_GBps", c.bus_bandwidth_Bps / 1e9}};
  }
  return j;
}

}  // namespace

const char* to_string(Collective collective) {
  switch (collective) {
    case Collective::kAllReduce:
      return "all_reduce";
    case Collective::kAllGather:
      return "all_gather";
    case Collective::kReduceScatter:
      return "reduce_scatter";
    case Collective::kBroadcast:
      return "broadcast";
    case Collective::kSendRecv:
      return "send_recv";
  }
  return "?";
}

const std::vector<Collective>& all_collectives() {
  static const std::vector<Collective> all = {Collective::kAllReduce, Collective::kAllGather,
                                              Collective::kReduceScatter, Collective::kBroadcast,
                                              Collective::kSendRecv};
  return all;
}

const LinkConstants& LinkLevel::of(Collective collective) const {
  const auto it = per_collective.find(collective);
  return it == per_collective.end() ? defaults : it->second;
}

ClusterSpec parse_cluster(const std::string& text, const std::string& source) {
  const auto doc = detail::JsonDocument::parse(text, source);
  ObjectReader in(doc, {});
  ClusterSpec c;
  c.source = doc.source;
  c.name = in.text("name", std::string("unnamed cluster"));
  for (const auto* free_form : {"description", "sources", "notes", "derivation"}) in.allow(free_form);
  c.gpus_per_node = static_cast<int>(in.integer("gpus_per_node"));
  {
    auto d = *in.object("device", true);
    const auto kind = d.text("kind", std::string("gpu"));
    if (kind != "gpu" && kind != "cpu") d.fail("kind", fmt::format("expected \"gpu\" or \"cpu\", got \"{}\"", kind));
    c.device.is_gpu = kind == "gpu";
    c.device.memory_gib = d.number("memory_gib");
    c.device.usable_memory_fraction = d.fraction("usable_memory_fraction", 0.92);
    if (auto peaks = d.object("peak_tflops", true)) {
      for (const auto& key : peaks->keys()) c.device.peak_tflops[key] = peaks->number(key);
      if (c.device.peak_tflops.empty()) d.fail("peak_tflops", "give at least one precision's peak, e.g. {\"bf16\": 989}");
    }
    c.device.matmul_efficiency = d.fraction("matmul_efficiency", 0.5);
    c.device.memory_bandwidth_GBps = d.number("memory_bandwidth_GBps", 2000.0);
    c.device.memory_efficiency = d.fraction("memory_efficiency", 0.7);
    c.device.layer_overhead_us = d.number("layer_overhead_us", 20.0, true);
    c.device.device_adam_ns_per_element = d.number("device_adam_ns_per_element", 0.02);
    c.device.host_adam_ns_per_element = d.number("host_adam_ns_per_element", 1.0);
    c.device.host_device_GBps = d.number("host_device_GBps", c.device.is_gpu ? 25.0 : 0.0, !c.device.is_gpu);
    c.device.host_memory_gib = d.number("host_memory_gib", 1024.0);
    c.device.cores_per_node = static_cast<int>(d.integer("cores_per_node", 0, 0));
    if (c.device.is_gpu && c.device.cores_per_node != 0) {
      d.fail("cores_per_node", "applies to CPU ranks (kind \"cpu\") only; remove it for GPUs");
    }
    d.allow("description");
    d.finish();
  }
  {
    auto level = *in.object("intra_node", true);
    c.intra_node = read_level(level);
    level.allow("description");
    level.finish();
  }
  if (auto level = in.object("inter_node")) {
    c.inter_node = read_level(*level);
    c.nics_per_node = static_cast<int>(level->integer("nics_per_node", c.gpus_per_node));
    level->allow("description");
    level->finish();
  } else {
    // One node only: nothing crosses nodes, but a job larger than a node still needs constants.
    c.inter_node = c.intra_node;
    c.nics_per_node = c.gpus_per_node;
  }
  c.overlap_efficiency = in.fraction("overlap_efficiency", 0.9);
  c.synchronous_extra_latency_s = in.number("synchronous_extra_latency_us", 0.0, true) * 1e-6;
  for (auto& d : in.objects("small_messages")) {
    ClusterSpec::Derating derating;
    derating.below_bytes = d.integer("below_bytes");
    derating.factor = d.fraction("bandwidth_factor");
    if (derating.factor == 0) d.fail("bandwidth_factor", "must be > 0");
    d.allow("description");
    d.finish();
    c.small_messages.push_back(derating);
  }
  in.finish();
  return c;
}

double compute_slowdown(const ClusterSpec& cluster, int world_size) {
  if (cluster.device.is_gpu || cluster.device.cores_per_node <= 0) return 1.0;
  const int ranks_per_node = std::max(1, std::min(world_size, cluster.gpus_per_node));
  return std::max(1.0, static_cast<double>(ranks_per_node) / cluster.device.cores_per_node);
}

std::string shipped_cluster_file(const std::string& name) {
  std::vector<std::string> tried;
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&local_cpu_cluster), &info) != 0 && info.dli_fname) {
    std::string dir = info.dli_fname;
    dir = dir.substr(0, dir.find_last_of('/') == std::string::npos ? 0 : dir.find_last_of('/'));
    tried.push_back((dir.empty() ? "." : dir) + "/../share/colo/clusters/" + name);
  }
  tried.push_back(std::string(COLO_PLANNER_SOURCE_CLUSTERS) + "/" + name);
  for (const auto& path : tried) {
    if (::access(path.c_str(), R_OK) == 0) return path;
  }
  throw std::invalid_argument(fmt::format("the shipped cluster file {} is in none of: {}; give a cluster file", name,
                                          fmt::join(tried, ", ")));
}

ClusterSpec local_cpu_cluster(int ranks, double memory_gib_per_rank) {
  ClusterSpec c;
  c.name = fmt::format("{} CPU rank{} of this machine (built-in rough constants, nothing measured)", ranks,
                       ranks == 1 ? "" : "s");
  c.source = "built in";
  c.gpus_per_node = std::max(ranks, 1);
  c.nics_per_node = c.gpus_per_node;
  c.device.is_gpu = false;
  c.device.memory_gib = memory_gib_per_rank;
  c.device.host_memory_gib = memory_gib_per_rank * c.gpus_per_node;
  c.device.peak_tflops = {{"fp32", 0.05}, {"bf16", 0.02}, {"fp16", 0.01}};
  c.device.matmul_efficiency = 0.6;
  c.device.memory_bandwidth_GBps = 10;
  c.device.layer_overhead_us = 50;
  c.device.device_adam_ns_per_element = 2;
  c.device.host_adam_ns_per_element = 2;
  c.device.host_device_GBps = 0;
  c.device.cores_per_node = static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  c.intra_node.defaults = {100e-6, 1e9};
  c.inter_node = c.intra_node;
  c.overlap_efficiency = 0;
  return c;
}

ClusterSpec read_cluster_file(const std::string& path) {
  const auto doc = detail::JsonDocument::read_file(path);
  return parse_cluster(doc.text, path);
}

std::string to_json(const ClusterSpec& c) {
  nlohmann::json peaks = nlohmann::json::object();
  for (const auto& [precision, tflops] : c.device.peak_tflops) peaks[precision] = tflops;
  nlohmann::json j = {
      {"name", c.name},
      {"gpus_per_node", c.gpus_per_node},
      {"device",
       {{"kind", c.device.is_gpu ? "gpu" : "cpu"},
        {"memory_gib", c.device.memory_gib},
        {"usable_memory_fraction", c.device.usable_memory_fraction},
        {"peak_tflops", peaks},
        {"matmul_efficiency", c.device.matmul_efficiency},
        {"memory_bandwidth_GBps", c.device.memory_bandwidth_GBps},
        {"memory_efficiency", c.device.memory_efficiency},
        {"layer_overhead_us", c.device.layer_overhead_us},
        {"device_adam_ns_per_element", c.device.device_adam_ns_per_element},
        {"host_adam_ns_per_element", c.device.host_adam_ns_per_element},
        {"host_device_GBps", c.device.host_device_GBps},
        {"host_memory_gib", c.device.host_memory_gib},
        {"cores_per_node", c.device.cores_per_node}}},
      {"intra_node", level_json(c.intra_node)},
      {"overlap_efficiency", c.overlap_efficiency},
      {"synchronous_extra_latency_us", c.synchronous_extra_latency_s * 1e6},
  };
  auto inter = level_json(c.inter_node);
  inter["nics_per_node"] = c.nics_per_node;
  j["inter_node"] = inter;
  if (!c.small_messages.empty()) {
    j["small_messages"] = nlohmann::json::array();
    for (const auto& d : c.small_messages) {
      j["small_messages"].push_back({{"below_bytes", d.below_bytes}, {"bandwidth_factor", d.factor}});
    }
  }
  return j.dump(2) + "\n";
}

}  // namespace colo::planner
