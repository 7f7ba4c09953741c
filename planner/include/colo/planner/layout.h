#pragma once

#include <colo/booster/plugin_options.h>
#include <colo/nn/vision_transformer.h>

#include <cstdint>
#include <string>

namespace colo::planner {

// One way to run a job: a plugin and its layout. Text form (name(), parse()): the plugin, then
// tokens, e.g.
//   "torch_ddp dp8 accum2 ckpt"
//   "low_level_zero dp8 zero2 offload"
//   "gemini dp8 auto" | "gemini dp8 static" | "gemini dp8 static optim_offload"
//   "hybrid_parallel dp4 pp4 tp4 sp zero1 1f1b mb4 ckpt" | "... interleaved chunks2 mb8"
//   "hybrid_parallel dp2 pp1 tp4 2d zero0" (2D tensor parallelism on a 2 x 2 grid)
//   "hybrid_parallel dp1 pp1 tp8 2.5d depth2 zero0" (2.5D: 2 layers of a 2 x 2 grid)
//   "hybrid_parallel dp1 pp1 tp8 3d zero0" (3D: a 2 x 2 x 2 cube)
// dpN is what the world leaves (world / (pp × tp)); mbN the microbatches of a pipelined
// hybrid_parallel step (0: not pipelined); accumN the accumulation passes of the others.
struct Layout {
  std::string plugin = "torch_ddp";
  int dp = 1;
  int pp = 1;
  int tp = 1;
  bool sequence_parallel = false;
  // hybrid_parallel's tp_mode: "1d" (Megatron), "2d" (a q x q grid, tp = q²), "2.5d" (tp_depth
  // layers of a q x q grid, tp = q²·tp_depth) or "3d" (a q x q x q cube, tp = q³); the grid modes
  // never with sp.
  std::string tp_mode = "1d";
  int tp_depth = 1;  // 2.5d's layers (token depthN)
  // low_level_zero: 1 or 2; hybrid_parallel: 0, 1 or 2; gemini: 3 (ZeRO-3, its chunks sharded).
  int zero_stage = 0;
  // low_level_zero / hybrid_parallel ZeRO: fp32 state and step on the host.
  bool cpu_offload = false;
  // gemini: "static" or "auto"; optim_offload: static placement with all optimizer state on the host.
  std::string gemini_placement = "static";
  bool optim_offload = false;
  int microbatches = 0;
  // A name in pipeline::builtin_schedules().
  std::string schedule = "1f1b";
  int chunks = 1;
  bool activation_checkpointing = false;
  int grad_accum = 1;

  int world_size() const { return dp * pp * tp; }
  bool pipelined() const { return plugin == "hybrid_parallel" && (pp > 1 || microbatches > 0); }
  // What the plugin shards its model state over (its data-parallel ranks).
  std::string name() const;
  // The plugin's options for this layout, with `precision`.
  PluginOptions plugin_options(const std::string& precision) const;

  // The reverse of name(), for a world of `world_size` ranks (dp, when not given, is what the
  // world leaves). Throws std::invalid_argument naming the token it cannot read and the valid
  // tokens of the plugin.
  static Layout parse(const std::string& text, int world_size);
};

// Why `config`'s blocks cannot be split as `layout`'s tensor parallelism splits them ("" when they
// can): 1d cuts the heads and hidden units tp ways; the grid modes cut heads and hidden units by
// their side q (2d: tp = q², 2.5d: q² × depth, 3d: q³) and the width by q (3d: by q³).
std::string tensor_split_problem(const nn::ViTConfig& config, const Layout& layout);

bool operator==(const Layout& a, const Layout& b);
inline bool operator!=(const Layout& a, const Layout& b) { return !(a == b); }

}  // namespace colo::planner
