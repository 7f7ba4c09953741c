#include <colo/plugins/gemini_options.h>

#include <colo/engine/memory_size.h>
#include <colo/booster/precision_options.h>

#include "communication_dtype.h"

namespace colo {

GeminiOptions GeminiOptions::parse(const PluginOptions& given) {
  OptionReader in("gemini", given);
  GeminiOptions parsed;
  auto& o = parsed.chunks();
  const auto precision = PrecisionOptions::read(in, given);
  o.precision(precision.precision());
  parsed.optimizer().max_grad_norm(precision.max_grad_norm()).loss_scaler(precision.loss_scaler());
  parsed.fp8(precision.fp8());
  const auto policy = in.get_choice("placement_policy", "static", {"static", "auto"},
                                    "static: the *_frac options place the chunks; auto: a warm-up step measures the "
                                    "device's memory and optimizer state stays on it while steady_cuda_cap_ratio allows");
  o.placement_policy(policy == "auto" ? GeminiPlacementPolicy::kAuto : GeminiPlacementPolicy::kStatic);
  o.shard_param_frac(in.get_double("shard_param_frac", o.shard_param_frac(),
                                   "static: fraction of the parameters (whole chunks, from the first) sharded and "
                                   "gathered per layer; 1 is ZeRO-3, 0 keeps every chunk gathered (ZeRO-2)"));
  o.offload_param_frac(in.get_double("offload_param_frac", o.offload_param_frac(),
                                     "static: fraction whose parameter shards live in host memory (needs "
                                     "shard_param_frac=1)"));
  o.offload_optim_frac(in.get_double("offload_optim_frac", o.offload_optim_frac(),
                                     "static: fraction whose fp32 masters, gradients and Adam moments live in host "
                                     "memory, stepped by the CPU"));
  o.steady_cuda_cap_ratio(in.get_double("steady_cuda_cap_ratio", o.steady_cuda_cap_ratio(),
                                        "auto: share of the device's memory that model state and the measured "
                                        "working memory may fill"));
  const auto device_mb = in.get_mebibytes("device_memory_mb", 0.0,
                                          "auto: the device's memory in MiB when not the whole device's (0: read it "
                                          "from the device)",
                                          /*zero_allowed=*/true);
  if (device_mb > 0.0) o.device_memory_bytes(memory_size_bytes(device_mb, kMebibytes));
  const auto chunk_mb = in.get_mebibytes("chunk_size_mb", 0.0,
                                         "MiB of parameters (in the compute dtype) per chunk; 0: searched from the "
                                         "layer sizes",
                                         /*zero_allowed=*/true);
  if (chunk_mb > 0.0) o.chunk_size_mb(chunk_mb);
  o.max_prefetch(in.get_int("max_prefetch", o.max_prefetch(), "chunks gathered ahead of the layer that needs them"));
  o.pin_memory(in.get_bool("pin_memory", o.pin_memory(),
                           "pin host memory of parameter shards and gradient staging (per chunk)"));
  o.overlap_communication(in.get_bool("overlap_communication", o.overlap_communication(),
                                      "reduce-scatter each chunk's gradients as soon as they are complete"));
  if (in.get_bool("cuda_graphs", false, "not implemented for gemini (see the error it gives)")) {
    in.fail("cuda_graphs=true is not implemented for gemini: its chunks are gathered, released and moved between "
            "host and device around each layer, decisions a graph replay cannot take; use torch_ddp or "
            "hybrid_parallel (one rank) with cuda_graphs=true, or cuda_graphs=false");
  }
  if (const auto communication = detail::read_communication_dtype(in)) o.communication_dtype(communication);
  for (const auto& error : o.violations()) in.fail(error);
  for (const auto& error : parsed.optimizer().violations()) in.fail(error);
  in.finish();
  return parsed;
}

PluginOptions GeminiOptions::to_options() const {
  const auto& o = chunks();
  const auto d = GeminiOptions().chunks();
  OptionWriter out;
  out.merge(PrecisionOptions()
                .precision(o.precision())
                .max_grad_norm(optimizer().max_grad_norm())
                .loss_scaler(optimizer().loss_scaler())
                .fp8(fp8())
                .to_options());
  out.set_string("placement_policy", o.placement_policy() == GeminiPlacementPolicy::kAuto ? "auto" : "static",
                 "static");
  out.set_double("shard_param_frac", o.shard_param_frac(), d.shard_param_frac());
  out.set_double("offload_param_frac", o.offload_param_frac(), d.offload_param_frac());
  out.set_double("offload_optim_frac", o.offload_optim_frac(), d.offload_optim_frac());
  out.set_double("steady_cuda_cap_ratio", o.steady_cuda_cap_ratio(), d.steady_cuda_cap_ratio());
  // Unset is the key's 0 (read from the device, searched); a set value is written even where it is
  // 0, which parse reads as unset.
  if (o.device_memory_bytes()) {
    out.set_double("device_memory_mb",
                   static_cast<double>(*o.device_memory_bytes()) / static_cast<double>(kMebibytes.bytes));
  }
  out.set_double("chunk_size_mb", o.chunk_size_mb());
  out.set_int("max_prefetch", o.max_prefetch(), d.max_prefetch());
  out.set_bool("pin_memory", o.pin_memory(), d.pin_memory());
  out.set_bool("overlap_communication", o.overlap_communication(), d.overlap_communication());
  detail::write_communication_dtype(out, o.communication_dtype(), "gemini");
  return out.options();
}

}  // namespace colo
