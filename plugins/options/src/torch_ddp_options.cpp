#include <colo/plugins/torch_ddp_options.h>

#include <colo/booster/precision_options.h>

namespace colo {
namespace {

TorchDdpOptions read_torch_ddp_options(OptionReader& in, const PluginOptions& given) {
  TorchDdpOptions o;
  o.bucket_cap_mb(in.get_mebibytes("bucket_cap_mb", o.bucket_cap_mb(),
                                   "MiB of gradients per all-reduce bucket (smaller: earlier overlap, more launches)",
                                   /*zero_allowed=*/false));
  o.find_unused_parameters(in.get_bool("find_unused_parameters", o.find_unused_parameters(),
                                       "allow parameters that get no gradient in some backward passes"));
  o.gradient_as_bucket_view(in.get_bool("gradient_as_bucket_view", o.gradient_as_bucket_view(),
                                        "after backward, gradients are views into the all-reduce buckets (no copy back)"));
  o.overlap_communication(in.get_bool(
      "overlap_communication", o.overlap_communication(),
      "all-reduce each bucket during backward as soon as it is full (false: all at the end of backward)"));
  o.broadcast_buffers(
      in.get_bool("broadcast_buffers", o.broadcast_buffers(), "broadcast rank 0's buffers before each training forward"));
  const auto precision = PrecisionOptions::read(in, given);
  o.precision(precision.precision()).max_grad_norm(precision.max_grad_norm()).loss_scaler(precision.loss_scaler());
  o.fp8(precision.fp8());
  o.master_weights(
      in.get_bool("master_weights", o.master_weights(), "keep fp32 master weights for the optimizer under fp16/bf16"));
  o.cuda_graphs(in.get_bool("cuda_graphs", o.cuda_graphs(),
                            "replay the training forward and backward as CUDA graphs (small batches: no launch cost)"));

  return o;
}

}  // namespace

TorchDdpOptions TorchDdpOptions::parse(const PluginOptions& options) {
  OptionReader in("torch_ddp", options);
  auto parsed = read_torch_ddp_options(in, options);
  in.finish();
  return parsed;
}

PluginOptions TorchDdpOptions::to_options() const {
  const TorchDdpOptions d;
  OptionWriter out;
  out.set_double("bucket_cap_mb", bucket_cap_mb(), d.bucket_cap_mb());
  out.set_bool("find_unused_parameters", find_unused_parameters(), d.find_unused_parameters());
  out.set_bool("gradient_as_bucket_view", gradient_as_bucket_view(), d.gradient_as_bucket_view());
  out.set_bool("overlap_communication", overlap_communication(), d.overlap_communication());
  out.set_bool("broadcast_buffers", broadcast_buffers(), d.broadcast_buffers());
  out.merge(
      PrecisionOptions().precision(precision()).max_grad_norm(max_grad_norm()).loss_scaler(loss_scaler()).fp8(fp8()).to_options());
  out.set_bool("master_weights", master_weights(), d.master_weights());
  out.set_bool("cuda_graphs", cuda_graphs(), d.cuda_graphs());
  return out.options();
}

}  // namespace colo
