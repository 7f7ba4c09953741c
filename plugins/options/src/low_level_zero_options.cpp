#include <colo/plugins/low_level_zero_options.h>

#include <colo/amp/precision.h>
#include <colo/booster/precision_options.h>
#include <fmt/format.h>

#include "communication_dtype.h"

namespace colo {
namespace {

LowLevelZeroOptions read_low_level_zero_options(OptionReader& in, const PluginOptions& given) {
  LowLevelZeroOptions parsed;
  auto& o = parsed.zero();
  o.stage(static_cast<int>(
      in.get_int("stage", o.stage(), "1: optimizer state and fp32 masters sharded; 2: gradients sharded too")));
  const auto precision = PrecisionOptions::read(in, given);
  o.precision(precision.precision()).max_grad_norm(precision.max_grad_norm()).loss_scaler(precision.loss_scaler());
  parsed.fp8(precision.fp8());
  o.bucket_cap_mb(in.get_mebibytes("reduce_bucket_size_mb", o.bucket_cap_mb(),
                                   "MiB of gradients per reduction / all-gather bucket (smaller: earlier overlap, more "
                                   "launches)",
                                   /*zero_allowed=*/false));
  o.overlap_communication(in.get_bool("overlap_communication", o.overlap_communication(),
                                      "reduce gradients during backward and gather weights during the next forward"));
  o.cpu_offload(in.get_bool("cpu_offload", o.cpu_offload(),
                            "fp32 masters, optimizer state and the Adam step on the CPU (pinned transfers)"));
  if (in.get_bool("cuda_graphs", false, "not implemented for low_level_zero (see the error it gives)")) {
    in.fail("cuda_graphs=true is not implemented for low_level_zero: ZeRO reduces each gradient from a "
            "per-parameter hook and gathers the updated weights layer by layer, which a graph replay does not "
            "do; use torch_ddp or hybrid_parallel (one rank) with cuda_graphs=true, or cuda_graphs=false");
  }
  if (const auto communication = detail::read_communication_dtype(in)) o.communication_dtype(communication);
  // ZeRO-3 is another engine's (the GeminiOptimizer's): say which plugin runs it, in place of the
  // engine's own words for the same rule.
  const bool stage3 = o.stage() == 3;
  if (stage3) {
    in.fail("stage=3 (parameters sharded too) is not low_level_zero's: use the gemini plugin (ZeRO-3 with "
            "chunk-based parameter sharding)");
  }
  for (const auto& error : o.violations()) {
    if (!(stage3 && error.rfind("stage 3", 0) == 0)) in.fail(error);
  }
  return parsed;
}

}  // namespace

LowLevelZeroOptions LowLevelZeroOptions::parse(const PluginOptions& options) {
  OptionReader in("low_level_zero", options);
  auto parsed = read_low_level_zero_options(in, options);
  in.finish();
  return parsed;
}

PluginOptions LowLevelZeroOptions::to_options() const {
  const auto& o = zero();
  const auto d = LowLevelZeroOptions().zero();
  OptionWriter out;
  out.set_int("stage", o.stage(), d.stage());
  out.merge(PrecisionOptions()
                .precision(o.precision())
                .max_grad_norm(o.max_grad_norm())
                .loss_scaler(o.loss_scaler())
                .fp8(fp8())
                .to_options());
  out.set_double("reduce_bucket_size_mb", o.bucket_cap_mb(), d.bucket_cap_mb());
  out.set_bool("overlap_communication", o.overlap_communication(), d.overlap_communication());
  out.set_bool("cpu_offload", o.cpu_offload(), d.cpu_offload());
  detail::write_communication_dtype(out, o.communication_dtype(), "low_level_zero");
  return out.options();
}

}  // namespace colo
