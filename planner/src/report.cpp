// What colo-plan prints and writes: a layout's breakdown (--explain) and the train_vit config.
#include <colo/planner/planner.h>
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "units.h"

namespace colo::planner {
namespace {

std::string ms(double seconds) { return fmt::format("{:.1f} ms", seconds * 1e3); }

}  // namespace

std::string explain(const Prediction& p, const PlanRequest& r) {
  const auto& b = p.breakdown;
  const double step = p.step_seconds;
  auto share = [&](double x) { return fmt::format("{:>10} {:5.1f} %", ms(x), step > 0 ? 100.0 * x / step : 0.0); };
  std::string out;
  out += fmt::format("layout: {}\n", p.layout.name());
  out += fmt::format("plugin options: ");
  bool first = true;
  for (const auto& [k, v] : p.layout.plugin_options(r.precision)) {
    out += fmt::format("{}{}={}", first ? "" : " ", k, v);
    first = false;
  }
  out += fmt::format("\npredicted: step {}, {:.1f} images/s, {:.1f} TFLOP/s per {}, MFU {:.1f} % ({} {}, {})\n",
                     ms(step), p.images_per_second, p.tflops_per_gpu, r.cluster.device.is_gpu ? "GPU" : "rank",
                     100.0 * p.mfu, r.world_size, r.cluster.device.is_gpu ? "GPUs" : "ranks",
                     r.profile ? "measured profile " + r.profile->source : "analytic compute");
  out += fmt::format("memory (Booster::plan_memory, largest rank): {:.2f} GiB of {:.2f} GiB usable{}{}\n",
                     static_cast<double>(p.device_bytes) / kGiB, static_cast<double>(p.usable_device_bytes) / kGiB,
                     p.host_bytes > 0 ? fmt::format(", host {:.2f} GiB", static_cast<double>(p.host_bytes) / kGiB) : "",
                     p.fits ? "" : " -- DOES NOT FIT: " + p.why_not);
  out += "breakdown (the rank that finishes last):\n";
  out += fmt::format("  compute                    {}\n", share(b.compute));
  if (b.recompute > 0) out += fmt::format("    of which recomputation   {}\n", share(b.recompute));
  out += fmt::format("  tensor-parallel comm.      {}\n", share(b.tp_comm));
  out += fmt::format("  pipeline sends             {}\n", share(b.pp_comm));
  out += fmt::format("  pipeline bubble            {}\n", share(b.bubble));
  out += fmt::format("  data-parallel comm. (exp.) {}\n", share(b.dp_comm));
  out += fmt::format("  optimizer step             {}\n", share(b.optimizer));
  out += fmt::format("  host<->device copies       {}\n", share(b.offload));
  if (b.plugin_work > 0) out += fmt::format("  the plugin's own work      {}\n", share(b.plugin_work));
  out += fmt::format("bound by: {}\n", p.bound);
  for (const auto& note : p.notes) out += "note: " + note + "\n";
  return out;
}

std::string train_vit_config(const Prediction& p, const PlanRequest& r) {
  using json = nlohmann::ordered_json;
  const auto& l = p.layout;
  const auto& c = r.model.vit;
  json j;
  j["description"] = fmt::format(
      "colo-plan's choice for {} on {} {} ({} per node, {:g} GiB each), global batch {}, {}: {}. Predicted (not "
      "measured): {:.1f} images/s, step {:.1f} ms, MFU {:.1f} %, {:.1f} GiB per rank{}. Synthetic data: set data.dataset "
      "to imagefolder and data.dir for real images. Check: train_vit --config THIS --dry-run --world-size {}",
      r.model.name, r.world_size, r.cluster.device.is_gpu ? "GPUs" : "CPU ranks", r.cluster.gpus_per_node,
      r.cluster.device.memory_gib, r.global_batch, r.precision, l.name(), p.images_per_second, p.step_seconds * 1e3,
      100.0 * p.mfu, static_cast<double>(p.device_bytes) / (1024.0 * 1024.0 * 1024.0),
      r.profile ? ", from the profile " + r.profile->source : "", r.world_size);
  j["plugin"] = l.plugin;
  j["precision"] = r.precision;
  if (l.plugin == "hybrid_parallel") {
    json parallel = {{"tp", l.tp}, {"pp", l.pp}, {"zero_stage", l.zero_stage}};
    // A grid mode in the hybrid example's words ("tensor": mode, size, depth), in place of "tp".
    if (l.tp_mode != "1d") {
      parallel.erase("tp");
      json tensor = {{"mode", l.tp_mode}, {"size", l.tp}};
      if (l.tp_mode == "2.5d") tensor["depth"] = l.tp_depth;
      parallel["tensor"] = tensor;
    }
    if (l.sequence_parallel) parallel["sequence_parallel"] = true;
    if (l.pipelined()) {
      parallel["microbatches"] = l.microbatches;
      parallel["schedule"] = l.schedule;
      if (l.chunks > 1) parallel["chunks"] = l.chunks;
    }
    j["parallel"] = parallel;
    if (l.cpu_offload) j["plugin_options"] = {{"cpu_offload", true}};
  } else {
    json options = json::object();
    for (const auto& [k, v] : l.plugin_options(r.precision)) {
      if (k != "precision") options[k] = v;
    }
    if (!options.empty()) j["plugin_options"] = options;
  }
  j["model"] = {{"preset", "custom"},
                {"image_size", c.image_size()},
                {"patch_size", c.patch_size()},
                {"hidden", c.embed_dim()},
                {"depth", c.depth()},
                {"heads", c.num_heads()},
                {"mlp_ratio", c.mlp_ratio()},
                {"activation_checkpointing", l.activation_checkpointing}};
  j["data"] = {{"dataset", "synthetic"}};
  json train = {{"batch_size", r.global_batch}};
  if (l.grad_accum > 1) train["grad_accum"] = l.grad_accum;
  j["train"] = train;
  return j.dump(2) + "\n";
}

}  // namespace colo::planner
