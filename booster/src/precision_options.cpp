#include <colo/booster/precision_options.h>

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

namespace colo {
namespace {

void read_fp8_recipe(OptionReader& in, const PluginOptions& given, PrecisionOptions& o) {
  auto& fp8 = o.fp8();
  fp8.scaling(nn::parse_fp8_scaling(in.get_choice(
      "fp8_scaling", "current", {"current", "delayed"},
      "precision=fp8: scale each float8 operand by its own max|x| (current) or by an amax history of earlier steps, "
      "recorded by the cast itself (delayed: one pass per operand instead of two)")));
  auto& d = fp8.delayed();
  d.history_length(in.get_int("fp8_amax_history_len", d.history_length(),
                              "fp8_scaling=delayed: steps of amax history a scale comes from"));
  d.reduction(amp::parse_amax_reduction(in.get_choice(
      "fp8_amax_compute_algo", "max", {"max", "most_recent"},
      "fp8_scaling=delayed: the history's largest amax (max) or the last step's (most_recent)")));
  d.margin(in.get_int("fp8_margin", d.margin(), "fp8_scaling=delayed: scales divided by 2^margin (headroom)"));
  if (d.history_length() < 1) in.fail(fmt::format("fp8_amax_history_len must be >= 1, got {}", d.history_length()));
  if (d.margin() < 0) in.fail(fmt::format("fp8_margin must be >= 0, got {}", d.margin()));
  if (o.precision() != amp::Precision::kFp8) {
    for (const char* key : {"fp8_scaling", "fp8_amax_history_len", "fp8_amax_compute_algo", "fp8_margin"}) {
      if (given.count(key)) {
        in.fail(fmt::format("{} only applies with precision=fp8 (precision is {})", key, amp::to_string(o.precision())));
      }
    }
  } else if (fp8.scaling() != nn::Fp8Scaling::kDelayed) {
    for (const char* key : {"fp8_amax_history_len", "fp8_amax_compute_algo", "fp8_margin"}) {
      if (given.count(key)) in.fail(fmt::format("{} only applies with fp8_scaling=delayed (it is current)", key));
    }
  }
}

}  // namespace

PrecisionOptions PrecisionOptions::read(OptionReader& in, const PluginOptions& given) {
  PrecisionOptions o;
  o.precision(amp::parse_precision(in.get_choice("precision", "fp32", {"fp32", "fp16", "bf16", "fp8"},
                                                   "working precision of weights, activations and gradients "
                                                   "(fp8: bf16 with float8 linear layers; GPUs of compute "
                                                   "capability 8.9 or newer)")));
  o.max_grad_norm(in.get_double("max_grad_norm", o.max_grad_norm(), "clip gradients to this global L2 norm; 0: off"));

  auto& s = o.loss_scaler();
  s.initial_scale(in.get_double("initial_scale", s.initial_scale(), "fp16: initial loss scale"));
  s.min_scale(in.get_double("min_scale", s.min_scale(), "fp16: smallest loss scale"));
  s.max_scale(in.get_double("max_scale", s.max_scale(), "fp16: largest loss scale"));
  s.growth_factor(in.get_double("growth_factor", s.growth_factor(), "fp16: scale multiplier after clean intervals"));
  s.backoff_factor(in.get_double("backoff_factor", s.backoff_factor(), "fp16: scale multiplier on overflow"));
  s.growth_interval(in.get_int("growth_interval", s.growth_interval(), "fp16: clean steps before the scale grows"));
  s.hysteresis(in.get_int("hysteresis", s.hysteresis(), "fp16: overflows tolerated before backing off"));

  if (!(o.max_grad_norm() >= 0.0) || !std::isfinite(o.max_grad_norm())) {
    in.fail(fmt::format("max_grad_norm must be >= 0 (0 disables clipping), got {}", o.max_grad_norm()));
  }
  try {
    amp::DynamicLossScaler check(s);
  } catch (const std::invalid_argument& e) {
    in.fail(e.what());
  }
  if (o.precision() != amp::Precision::kFp16) {
    for (const char* key : {"initial_scale", "min_scale", "max_scale", "growth_factor", "backoff_factor",
                            "growth_interval", "hysteresis"}) {
      if (given.count(key)) {
        in.fail(fmt::format("{} only applies with precision=fp16 (precision is {})", key, amp::to_string(o.precision())));
      }
    }
  }
  read_fp8_recipe(in, given, o);
  return o;
}

PluginOptions PrecisionOptions::to_options() const {
  const PrecisionOptions d;
  const auto& s = loss_scaler();
  const auto& ds = d.loss_scaler();
  OptionWriter out;
  out.set_string("precision", amp::to_string(precision()), amp::to_string(d.precision()));
  out.set_double("max_grad_norm", max_grad_norm(), d.max_grad_norm());
  out.set_double("initial_scale", s.initial_scale(), ds.initial_scale());
  out.set_double("min_scale", s.min_scale(), ds.min_scale());
  out.set_double("max_scale", s.max_scale(), ds.max_scale());
  out.set_double("growth_factor", s.growth_factor(), ds.growth_factor());
  out.set_double("backoff_factor", s.backoff_factor(), ds.backoff_factor());
  out.set_int("growth_interval", s.growth_interval(), ds.growth_interval());
  out.set_int("hysteresis", s.hysteresis(), ds.hysteresis());
  const auto& f = fp8().delayed();
  const auto& df = d.fp8().delayed();
  out.set_string("fp8_scaling", nn::to_string(fp8().scaling()), nn::to_string(d.fp8().scaling()));
  if (fp8().scaling() == nn::Fp8Scaling::kDelayed) {  // read() takes these keys only then
    out.set_int("fp8_amax_history_len", f.history_length(), df.history_length());
    out.set_string("fp8_amax_compute_algo", amp::to_string(f.reduction()), amp::to_string(df.reduction()));
    out.set_int("fp8_margin", f.margin(), df.margin());
  }
  return out.options();
}

}  // namespace colo
