// enumerate_layouts: the search space (planner.h says what it covers).
#include <colo/pipeline/schedule_registry.h>
#include <colo/planner/planner.h>

#include <algorithm>
#include <cmath>

namespace colo::planner {
namespace {

std::vector<int> divisors(int64_t n, int64_t at_most) {
  std::vector<int> out;
  for (int64_t d = 1; d <= std::min(n, at_most); ++d) {
    if (n % d == 0) out.push_back(static_cast<int>(d));
  }
  return out;
}

}  // namespace

std::vector<Layout> enumerate_layouts(const PlanRequest& r) {
  std::vector<Layout> out;
  const auto wants = [&](const char* plugin) {
    return std::find(r.plugins.begin(), r.plugins.end(), plugin) != r.plugins.end();
  };
  const auto& c = r.model.vit;
  const int world = r.world_size;
  const int layers = static_cast<int>(c.depth()) + 1;
  const std::vector<bool> both = {false, true};

  // Plain data parallelism over the world.
  if (world >= 1 && r.global_batch % world == 0) {
    const int64_t local = r.global_batch / world;
    for (int accum : divisors(local, r.max_grad_accum)) {
      for (bool ckpt : both) {
        Layout base;
        base.dp = world;
        base.grad_accum = accum;
        base.activation_checkpointing = ckpt;
        if (wants("torch_ddp")) {
          Layout l = base;
          l.plugin = "torch_ddp";
          out.push_back(l);
        }
        if (wants("low_level_zero")) {
          for (int stage : {1, 2}) {
            for (bool offload : both) {
              if (offload && !r.include_offload) continue;
              Layout l = base;
              l.plugin = "low_level_zero";
              l.zero_stage = stage;
              l.cpu_offload = offload;
              out.push_back(l);
            }
          }
        }
        if (wants("gemini")) {
          for (int placement = 0; placement < 3; ++placement) {
            if (placement == 1 && !r.include_offload) continue;
            Layout l = base;
            l.plugin = "gemini";
            l.zero_stage = 3;
            l.gemini_placement = placement == 2 ? "auto" : "static";
            l.optim_offload = placement == 1;
            out.push_back(l);
          }
        }
      }
    }
  }
  if (!wants("hybrid_parallel")) return out;

  for (int tp : divisors(world, world)) {
    if (tp > r.cluster.gpus_per_node && tp > 1) continue;  // tensor parallelism across nodes: never worth it
    for (int pp : divisors(world / tp, layers)) {
      const int dp = world / (tp * pp);
      if (r.global_batch % dp != 0) continue;
      const int64_t local = r.global_batch / dp;
      // 1d without and with sequence parallelism; 2d where tp is a square q² whose side divides
      // the heads, the MLP and the width; 2.5d (below); 3d where tp is a cube q³ whose side divides the heads
      // and the MLP and whose cube divides the width (never with sp: they split the activations
      // themselves).
      const int q = static_cast<int>(std::lround(std::sqrt(static_cast<double>(tp))));
      const bool grid = tp >= 4 && q * q == tp && c.num_heads() % q == 0 && c.mlp_hidden_dim() % q == 0 &&
                        c.embed_dim() % q == 0;
      const int side = static_cast<int>(std::lround(std::cbrt(static_cast<double>(tp))));
      const bool cube = tp >= 8 && side * side * side == tp && c.num_heads() % side == 0 &&
                        c.mlp_hidden_dim() % side == 0 && c.embed_dim() % tp == 0;
      // 2.5d: every depth d >= 2 leaving a square q² >= 4 whose side divides them likewise.
      struct Mode {
        bool sp;
        std::string name;
        int depth;
      };
      std::vector<Mode> modes;
      if (c.num_heads() % tp == 0 && c.mlp_hidden_dim() % tp == 0) modes = {{false, "1d", 1}, {true, "1d", 1}};
      if (grid) modes.push_back({false, "2d", 1});
      for (int d = 2; d <= tp / 4; ++d) {
        if (tp % d != 0) continue;
        const int side_of_layer = static_cast<int>(std::lround(std::sqrt(static_cast<double>(tp / d))));
        if (side_of_layer * side_of_layer * d == tp && c.num_heads() % side_of_layer == 0 &&
            c.mlp_hidden_dim() % side_of_layer == 0 && c.embed_dim() % side_of_layer == 0) {
          modes.push_back({false, "2.5d", d});
        }
      }
      if (cube) modes.push_back({false, "3d", 1});
      for (const auto& [sp, mode, depth] : modes) {
        if (sp && tp == 1) continue;
        for (int zero : {0, 1, 2, 3}) {
          if (zero > 0 && dp == 1) continue;  // nothing to shard over
          for (bool offload : both) {
            if (offload && (zero == 0 || !r.include_offload)) continue;
            for (bool ckpt : both) {
              Layout base;
              base.plugin = "hybrid_parallel";
              base.dp = dp;
              base.pp = pp;
              base.tp = tp;
              base.sequence_parallel = sp;
              base.tp_mode = mode;
              base.tp_depth = depth;
              base.zero_stage = zero;
              base.cpu_offload = offload;
              base.activation_checkpointing = ckpt;
              if (pp == 1) {
                out.push_back(base);  // no pipeline
                for (int m : divisors(local, r.max_microbatches)) {
                  if (m < 2) continue;
                  Layout l = base;
                  l.microbatches = m;
                  out.push_back(l);
                }
                continue;
              }
              for (int m : divisors(local, r.max_microbatches)) {
                if (m < pp) continue;
                // Every registered schedule: one chunk per rank, then those that interleave
                // chunks with each chunk count asked for, where the schedule's rules allow it.
                const auto& schedules = pipeline::builtin_schedules();
                for (const auto& entry : schedules.entries()) {
                  if (entry.splits_backward && sp) continue;  // not supported together
                  if (!schedules.shape_problems(entry.name, pipeline::ScheduleShape(pp, m)).empty()) continue;
                  Layout l = base;
                  l.microbatches = m;
                  l.schedule = entry.name;
                  out.push_back(l);
                }
                for (const auto& entry : schedules.entries()) {
                  if (!entry.supports_chunks || (entry.splits_backward && sp)) continue;
                  for (int chunks : r.interleaved_chunks) {
                    if (chunks < 2 || pp * chunks > layers) continue;
                    if (!schedules.shape_problems(entry.name, pipeline::ScheduleShape(pp, m).chunks(chunks)).empty()) {
                      continue;
                    }
                    Layout l = base;
                    l.microbatches = m;
                    l.schedule = entry.name;
                    l.chunks = chunks;
                    out.push_back(l);
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return out;
}

}  // namespace colo::planner
