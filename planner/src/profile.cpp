#include <colo/planner/profile.h>
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "json_fields.h"

namespace colo::planner {
namespace {

using detail::ObjectReader;

const char* const kLayerKinds[] = {"patch_embedding", "encoder_block", "head"};

OptimizerTimes read_optimizer(ObjectReader in) {
  OptimizerTimes t;
  t.fixed_s = in.number("fixed_s", 0.0, true);
  t.per_element_s = in.number("per_element_s");
  in.finish();
  return t;
}

nlohmann::json optimizer_json(const OptimizerTimes& t) { return {{"fixed_s", t.fixed_s}, {"per_element_s", t.per_element_s}}; }

double lerp(double x0, double y0, double x1, double y1, double x) {
  if (x1 == x0) return y0;
  return y0 + (y1 - y0) * (x - x0) / (x1 - x0);
}

}  // namespace

bool CostProfile::has(const std::string& layer, int tp, bool sequence_parallel) const {
  return std::any_of(layers.begin(), layers.end(), [&](const LayerProfile& p) {
    return p.layer == layer && p.tp == tp && p.sequence_parallel == sequence_parallel && !p.points.empty();
  });
}

LayerTimes CostProfile::at(const std::string& layer, int tp, bool sequence_parallel, int64_t samples) const {
  const LayerProfile* found = nullptr;
  for (const auto& p : layers) {
    if (p.layer == layer && p.tp == tp && p.sequence_parallel == sequence_parallel && !p.points.empty()) found = &p;
  }
  if (!found) {
    throw std::invalid_argument(fmt::format(
        "the profile {} has no {} at tp={}{}: measure it (colo-plan profile --tp {}{}) or plan without --profile",
        source.empty() ? "given" : source, layer, tp, sequence_parallel ? " with sequence parallelism" : "", tp,
        sequence_parallel ? " --sequence-parallel" : ""));
  }
  const auto& pts = found->points;
  if (pts.size() == 1) {
    // One size: scale by samples.
    const double k = static_cast<double>(samples) / static_cast<double>(pts[0].samples);
    auto t = pts[0];
    t.samples = samples;
    for (double* v : {&t.forward, &t.backward, &t.input_grad, &t.weight_grad, &t.checkpointed_forward,
                      &t.checkpointed_backward}) {
      *v *= k;
    }
    return t;
  }
  std::size_t hi = 1;
  while (hi + 1 < pts.size() && pts[hi].samples < samples) ++hi;
  const auto& a = pts[hi - 1];
  const auto& b = pts[hi];
  const double x = static_cast<double>(samples);
  const double xa = static_cast<double>(a.samples), xb = static_cast<double>(b.samples);
  LayerTimes t;
  t.samples = samples;
  auto mix = [&](double LayerTimes::*field) {
    const double v = lerp(xa, a.*field, xb, b.*field, x);
    return std::max(v, 0.1 * pts.front().*field);
  };
  t.forward = mix(&LayerTimes::forward);
  t.backward = mix(&LayerTimes::backward);
  t.input_grad = mix(&LayerTimes::input_grad);
  t.weight_grad = mix(&LayerTimes::weight_grad);
  t.checkpointed_forward = mix(&LayerTimes::checkpointed_forward);
  t.checkpointed_backward = mix(&LayerTimes::checkpointed_backward);
  return t;
}

const PluginOverhead* CostProfile::overhead(const std::string& key) const {
  for (const auto& po : plugin_overheads) {
    if (po.key == key) return &po;
  }
  return nullptr;
}

CostProfile parse_profile(const std::string& text, const std::string& source) {
  const auto doc = detail::JsonDocument::parse(text, source);
  ObjectReader in(doc, {});
  CostProfile p;
  p.source = doc.source;
  p.device = in.text("device");
  p.precision = in.text("precision");
  if (p.precision != "fp32" && p.precision != "bf16" && p.precision != "fp16" && p.precision != "fp8") {
    in.fail("precision", fmt::format("expected fp32, bf16, fp16 or fp8, got \"{}\"", p.precision));
  }
  p.threads = static_cast<int>(in.integer("threads", 0, 0));
  p.blocks_per_call = static_cast<int>(in.integer("blocks_per_call", 1, 1));  // files before it: one block
  in.allow("description");
  in.allow("command");
  in.allow("date");
  {
    auto m = *in.object("model", true);
    p.model.image_size(m.integer("image_size"))
        .patch_size(m.integer("patch_size"))
        .in_channels(m.integer("in_channels", 3))
        .num_classes(m.integer("num_classes"))
        .embed_dim(m.integer("embed_dim"))
        .depth(m.integer("depth"))
        .num_heads(m.integer("num_heads"))
        .mlp_ratio(m.number("mlp_ratio"));
    m.finish();
  }
  for (auto& l : in.objects("layers", true)) {
    LayerProfile layer;
    layer.layer = l.text("layer");
    if (std::find(std::begin(kLayerKinds), std::end(kLayerKinds), layer.layer) == std::end(kLayerKinds)) {
      l.fail("layer", fmt::format("expected patch_embedding, encoder_block or head, got \"{}\"", layer.layer));
    }
    layer.tp = static_cast<int>(l.integer("tp", 1));
    layer.sequence_parallel = l.boolean("sequence_parallel", false);
    for (auto& point : l.objects("points", true)) {
      LayerTimes t;
      t.samples = point.integer("samples");
      t.forward = point.number("forward_s");
      t.backward = point.number("backward_s");
      t.input_grad = point.number("input_grad_s", t.backward / 2);
      t.weight_grad = point.number("weight_grad_s", t.backward / 2);
      t.checkpointed_forward = point.number("checkpointed_forward_s", t.forward);
      t.checkpointed_backward = point.number("checkpointed_backward_s", t.forward + t.backward);
      if (!layer.points.empty() && t.samples <= layer.points.back().samples) {
        point.fail("samples", fmt::format("points must be in increasing samples; {} follows {}", t.samples,
                                          layer.points.back().samples));
      }
      point.finish();
      layer.points.push_back(t);
    }
    if (layer.points.empty()) l.fail("points", "needs at least one measured size");
    l.finish();
    p.layers.push_back(std::move(layer));
  }
  p.device_optimizer = read_optimizer(*in.object("device_optimizer", true));
  if (auto host = in.object("host_optimizer")) p.host_optimizer = read_optimizer(*host);
  p.host_to_device_GBps = in.number("host_to_device_GBps", 0.0, true);
  p.device_to_host_GBps = in.number("device_to_host_GBps", 0.0, true);
  p.matmul_tflops = in.number("matmul_tflops", 0.0, true);
  for (auto& o : in.objects("plugin_overheads")) {
    PluginOverhead po;
    po.key = o.text("key");
    const auto& keys = plugin_overhead_keys();
    if (std::find(keys.begin(), keys.end(), po.key) == keys.end()) {
      o.fail("key", fmt::format("expected gemini, low_level_zero zero1 or low_level_zero zero2, got \"{}\"", po.key));
    }
    po.depth = o.integer("depth");
    po.samples = o.integer("samples");
    po.elements = o.integer("elements");
    po.step_s = o.number("step_s");
    po.baseline_step_s = o.number("baseline_step_s");
    po.per_element_s = o.number("per_element_s", std::nullopt, true);
    o.finish();
    p.plugin_overheads.push_back(po);
  }
  in.finish();
  return p;
}

CostProfile read_profile_file(const std::string& path) {
  const auto doc = detail::JsonDocument::read_file(path);
  return parse_profile(doc.text, path);
}

std::string to_json(const CostProfile& p) {
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& l : p.layers) {
    nlohmann::json points = nlohmann::json::array();
    for (const auto& t : l.points) {
      points.push_back({{"samples", t.samples},
                        {"forward_s", t.forward},
                        {"backward_s", t.backward},
                        {"input_grad_s", t.input_grad},
                        {"weight_grad_s", t.weight_grad},
                        {"checkpointed_forward_s", t.checkpointed_forward},
                        {"checkpointed_backward_s", t.checkpointed_backward}});
    }
    layers.push_back({{"layer", l.layer}, {"tp", l.tp}, {"sequence_parallel", l.sequence_parallel}, {"points", points}});
  }
  nlohmann::json j = {{"device", p.device},
                      {"precision", p.precision},
                      {"threads", p.threads},
                      {"blocks_per_call", p.blocks_per_call},
                      {"model",
                       {{"image_size", p.model.image_size()},
                        {"patch_size", p.model.patch_size()},
                        {"in_channels", p.model.in_channels()},
                        {"num_classes", p.model.num_classes()},
                        {"embed_dim", p.model.embed_dim()},
                        {"depth", p.model.depth()},
                        {"num_heads", p.model.num_heads()},
                        {"mlp_ratio", p.model.mlp_ratio()}}},
                      {"layers", layers},
                      {"device_optimizer", optimizer_json(p.device_optimizer)},
                      {"host_to_device_GBps", p.host_to_device_GBps},
                      {"device_to_host_GBps", p.device_to_host_GBps},
                      {"matmul_tflops", p.matmul_tflops}};
  if (p.host_optimizer) j["host_optimizer"] = optimizer_json(*p.host_optimizer);
  if (!p.plugin_overheads.empty()) {
    nlohmann::json overheads = nlohmann::json::array();
    for (const auto& po : p.plugin_overheads) {
      overheads.push_back({{"key", po.key},
                           {"depth", po.depth},
                           {"samples", po.samples},
                           {"elements", po.elements},
                           {"step_s", po.step_s},
                           {"baseline_step_s", po.baseline_step_s},
                           {"per_element_s", po.per_element_s}});
    }
    j["plugin_overheads"] = overheads;
  }
  return j.dump(2) + "\n";
}

std::optional<std::string> profile_mismatch(const CostProfile& p, const nn::ViTConfig& m) {
  const std::pair<const char*, std::pair<double, double>> fields[] = {
      {"image_size", {static_cast<double>(p.model.image_size()), static_cast<double>(m.image_size())}},
      {"patch_size", {static_cast<double>(p.model.patch_size()), static_cast<double>(m.patch_size())}},
      {"in_channels", {static_cast<double>(p.model.in_channels()), static_cast<double>(m.in_channels())}},
      {"num_classes", {static_cast<double>(p.model.num_classes()), static_cast<double>(m.num_classes())}},
      {"embed_dim", {static_cast<double>(p.model.embed_dim()), static_cast<double>(m.embed_dim())}},
      {"num_heads", {static_cast<double>(p.model.num_heads()), static_cast<double>(m.num_heads())}},
      {"mlp_ratio", {p.model.mlp_ratio(), m.mlp_ratio()}},
  };
  for (const auto& [name, values] : fields) {
    if (values.first != values.second) {
      return fmt::format("the profile was measured with {} {}, the model has {}", name, values.first, values.second);
    }
  }
  return std::nullopt;
}

}  // namespace colo::planner
