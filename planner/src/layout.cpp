#include <colo/pipeline/schedule_registry.h>
#include <colo/planner/layout.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <vector>

namespace colo::planner {
namespace {

const std::vector<std::string> kPlugins = {"torch_ddp", "low_level_zero", "gemini", "hybrid_parallel"};

// "mb8" -> 8 when `text` is `prefix` followed by a whole number >= minimum.
bool numbered(const std::string& text, const std::string& prefix, int minimum, int* out) {
  if (text.rfind(prefix, 0) != 0 || text.size() == prefix.size()) return false;
  const auto digits = text.substr(prefix.size());
  if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 6) return false;
  const int value = std::stoi(digits);
  if (value < minimum) return false;
  *out = value;
  return true;
}

std::string tokens_of(const std::string& plugin) {
  if (plugin == "torch_ddp") return "dpN, accumN, ckpt";
  if (plugin == "low_level_zero") return "dpN, zero1, zero2, offload, accumN, ckpt";
  if (plugin == "gemini") return "dpN, static, auto, optim_offload, accumN, ckpt";
  return fmt::format("dpN, ppN, tpN, 2d, 2.5d, depthN, 3d, sp, zero0, zero1, zero2, offload, {}, mbN, chunksN, ckpt",
                     fmt::join(pipeline::builtin_schedules().names(), ", "));
}

}  // namespace

std::string Layout::name() const {
  std::string text = fmt::format("{} dp{}", plugin, dp);
  if (plugin == "hybrid_parallel") {
    text += fmt::format(" pp{} tp{}", pp, tp);
    if (tp_mode != "1d") text += " " + tp_mode;
    if (tp_mode == "2.5d") text += fmt::format(" depth{}", tp_depth);
    if (sequence_parallel) text += " sp";
    text += fmt::format(" zero{}", zero_stage);
    if (cpu_offload) text += " offload";
    if (pipelined()) {
      text += " " + schedule;
      if (chunks > 1) text += fmt::format(" chunks{}", chunks);
      text += fmt::format(" mb{}", microbatches);
    }
  } else if (plugin == "low_level_zero") {
    text += fmt::format(" zero{}", zero_stage);
    if (cpu_offload) text += " offload";
  } else if (plugin == "gemini") {
    text += " " + gemini_placement;
    if (optim_offload) text += " optim_offload";
  }
  if (grad_accum > 1) text += fmt::format(" accum{}", grad_accum);
  if (activation_checkpointing) text += " ckpt";
  return text;
}

PluginOptions Layout::plugin_options(const std::string& precision) const {
  PluginOptions o{{"precision", precision}};
  if (plugin == "low_level_zero") {
    o["stage"] = std::to_string(zero_stage);
    if (cpu_offload) o["cpu_offload"] = "true";
  } else if (plugin == "gemini") {
    o["placement_policy"] = gemini_placement;
    if (optim_offload) o["offload_optim_frac"] = "1";
  } else if (plugin == "hybrid_parallel") {
    o["tp_size"] = std::to_string(tp);
    o["pp_size"] = std::to_string(pp);
    if (tp_mode != "1d") o["tp_mode"] = tp_mode;
    if (tp_mode == "2.5d") o["tp_depth"] = std::to_string(tp_depth);
    if (sequence_parallel) o["enable_sequence_parallelism"] = "true";
    o["zero_stage"] = std::to_string(zero_stage);
    if (cpu_offload) o["cpu_offload"] = "true";
    if (pipelined()) {
      o["num_microbatches"] = std::to_string(microbatches);
      o["pp_style"] = schedule;
      if (chunks > 1) o["num_model_chunks"] = std::to_string(chunks);
    }
  }
  return o;
}

Layout Layout::parse(const std::string& text, int world_size) {
  std::istringstream in(text);
  std::vector<std::string> tokens;
  for (std::string t; in >> t;) tokens.push_back(t);
  if (tokens.empty()) throw std::invalid_argument("an empty layout: give a plugin and its tokens, e.g. \"torch_ddp dp8\"");
  Layout l;
  l.plugin = tokens.front();
  if (std::find(kPlugins.begin(), kPlugins.end(), l.plugin) == kPlugins.end()) {
    throw std::invalid_argument(fmt::format("layout \"{}\": the first word must be a plugin: {}", text,
                                            fmt::join(kPlugins, ", ")));
  }
  if (l.plugin == "low_level_zero") l.zero_stage = 1;
  if (l.plugin == "gemini") l.zero_stage = 3;
  int given_dp = 0;
  const bool hybrid = l.plugin == "hybrid_parallel";
  for (std::size_t i = 1; i < tokens.size(); ++i) {
    const auto& t = tokens[i];
    int n = 0;
    bool ok = true;
    if (numbered(t, "dp", 1, &n)) {
      given_dp = n;
    } else if (numbered(t, "accum", 1, &n) && !hybrid) {
      l.grad_accum = n;
    } else if (t == "ckpt") {
      l.activation_checkpointing = true;
    } else if (l.plugin == "low_level_zero" && (t == "zero1" || t == "zero2")) {
      l.zero_stage = t == "zero1" ? 1 : 2;
    } else if ((l.plugin == "low_level_zero" || hybrid) && t == "offload") {
      l.cpu_offload = true;
    } else if (l.plugin == "gemini" && (t == "static" || t == "auto")) {
      l.gemini_placement = t;
    } else if (l.plugin == "gemini" && t == "optim_offload") {
      l.optim_offload = true;
    } else if (hybrid && numbered(t, "pp", 1, &n)) {
      l.pp = n;
    } else if (hybrid && numbered(t, "tp", 1, &n)) {
      l.tp = n;
    } else if (hybrid && (t == "2d" || t == "2.5d" || t == "3d")) {
      l.tp_mode = t;
    } else if (hybrid && numbered(t, "depth", 1, &n)) {
      l.tp_depth = n;
    } else if (hybrid && t == "sp") {
      l.sequence_parallel = true;
    } else if (hybrid && (t == "zero0" || t == "zero1" || t == "zero2" || t == "zero3")) {
      l.zero_stage = t[4] - '0';
    } else if (hybrid && numbered(t, "mb", 1, &n)) {
      l.microbatches = n;
    } else if (hybrid && numbered(t, "chunks", 1, &n)) {
      l.chunks = n;
    } else if (hybrid && pipeline::builtin_schedules().find(t)) {
      l.schedule = t;
    } else {
      ok = false;
    }
    if (!ok) {
      throw std::invalid_argument(fmt::format("layout \"{}\": cannot read '{}'; a {} layout takes: {}", text, t,
                                              l.plugin, tokens_of(l.plugin)));
    }
  }
  if (l.optim_offload && l.gemini_placement == "auto") {
    throw std::invalid_argument(fmt::format("layout \"{}\": optim_offload is a static placement; auto places the "
                                            "optimizer state itself", text));
  }
  if (l.tp_mode == "2d") {
    const int q = static_cast<int>(std::lround(std::sqrt(static_cast<double>(l.tp))));
    if (q * q != l.tp) {
      throw std::invalid_argument(fmt::format("layout \"{}\": 2d needs tp = q² (a q x q grid), got tp{}", text, l.tp));
    }
  }
  if (l.tp_depth != 1 && l.tp_mode != "2.5d") {
    throw std::invalid_argument(fmt::format("layout \"{}\": depth{} is 2.5d's: add 2.5d or drop it", text, l.tp_depth));
  }
  if (l.tp_mode == "2.5d") {
    const int layer = l.tp % l.tp_depth == 0 ? l.tp / l.tp_depth : 0;
    const int q = static_cast<int>(std::lround(std::sqrt(static_cast<double>(layer))));
    if (layer == 0 || q * q != layer) {
      throw std::invalid_argument(fmt::format(
          "layout \"{}\": 2.5d with depth{} needs tp = q² x {} ({} layers of a q x q grid), got tp{}", text,
          l.tp_depth, l.tp_depth, l.tp_depth, l.tp));
    }
  }
  if (l.tp_mode == "3d") {
    const int q = static_cast<int>(std::lround(std::cbrt(static_cast<double>(l.tp))));
    if (q * q * q != l.tp) {
      throw std::invalid_argument(
          fmt::format("layout \"{}\": 3d needs tp = q³ (a q x q x q cube), got tp{}", text, l.tp));
    }
  }
  if (l.tp_mode != "1d" && l.sequence_parallel) {
    throw std::invalid_argument(
        fmt::format("layout \"{}\": {} splits the activations already: drop sp", text, l.tp_mode));
  }
  if (world_size < 1 || world_size % (l.pp * l.tp) != 0) {
    throw std::invalid_argument(
        fmt::format("layout \"{}\": pp {} x tp {} does not divide the world size {}", text, l.pp, l.tp, world_size));
  }
  l.dp = world_size / (l.pp * l.tp);
  if (given_dp != 0 && given_dp != l.dp) {
    throw std::invalid_argument(fmt::format("layout \"{}\": dp{} does not match the world: {} ranks / (pp {} x tp {}) "
                                            "= dp {}",
                                            text, given_dp, world_size, l.pp, l.tp, l.dp));
  }
  if (hybrid && l.pp > 1 && l.microbatches == 0) {
    throw std::invalid_argument(fmt::format("layout \"{}\": pp{} needs mbN (microbatches per step)", text, l.pp));
  }
  return l;
}

std::string tensor_split_problem(const nn::ViTConfig& c, const Layout& l) {
  if (l.tp <= 1) return "";
  if (l.tp_mode == "1d") {
    if (c.num_heads() % l.tp == 0 && c.mlp_hidden_dim() % l.tp == 0) return "";
    return fmt::format("tp {} does not divide the {} heads and {} hidden units", l.tp, c.num_heads(),
                       c.mlp_hidden_dim());
  }
  const bool cube = l.tp_mode == "3d";
  const double cells = l.tp_mode == "2.5d" ? static_cast<double>(l.tp) / l.tp_depth : static_cast<double>(l.tp);
  const int q = static_cast<int>(std::lround(cube ? std::cbrt(cells) : std::sqrt(cells)));
  const int width_multiple = cube ? q * q * q : q;
  if (c.num_heads() % q == 0 && c.mlp_hidden_dim() % q == 0 && c.embed_dim() % width_multiple == 0) return "";
  return fmt::format("{} (side {}) does not divide the {} heads and {} hidden units, or {} the width {}", l.tp_mode, q,
                     c.num_heads(), c.mlp_hidden_dim(), width_multiple, c.embed_dim());
}

bool operator==(const Layout& a, const Layout& b) {
  auto key = [](const Layout& l) {
    return std::make_tuple(l.plugin, l.dp, l.pp, l.tp, l.tp_mode, l.tp_depth, l.sequence_parallel, l.zero_stage, l.cpu_offload,
                           l.gemini_placement, l.optim_offload, l.microbatches, l.schedule, l.chunks,
                           l.activation_checkpointing, l.grad_accum);
  };
  return key(a) == key(b);
}

}  // namespace colo::planner
