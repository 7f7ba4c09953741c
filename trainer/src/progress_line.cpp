#include "progress_line.h"

#include <colo/trainer/trainer.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include <set>
#include <string>
#include <variant>

namespace colo {

std::string format_duration(double seconds) {
  const auto s = static_cast<int64_t>(std::max(0.0, std::round(seconds)));
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

namespace detail {
namespace {

// The fields the layout below places (or leaves out on purpose: the metrics log has them).
const std::set<std::string>& laid_out_fields() {
  static const std::set<std::string> fields = {
      "event", "epoch", "step", "skipped_steps", "grad_norm", "elapsed_s", "loss", "lr", "images_per_s",
      "loader_images_per_cpu_s", "data_wait_s", "mfu", "top1", "images", "seconds"};
  return fields;
}

std::string value_text(const Record::Value& value) {
  if (const auto* i = std::get_if<int64_t>(&value)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&value)) return fmt::format("{:.4g}", *d);
  return std::get<std::string>(value);
}

std::string other_fields(const Record& r) {
  std::string text;
  for (const auto& [key, value] : r.values()) {
    if (!laid_out_fields().count(key)) text += fmt::format("  {} {}", key, value_text(value));
  }
  return text;
}

}  // namespace

std::string progress_line(const Record& r, const ProgressPosition& at) {
  if (r.text_of("event") == "eval") {
    std::string line = at.in_fit ? fmt::format("epoch {}/{} ", static_cast<int64_t>(r.number("epoch")), at.epochs)
                       : at.global_step > 0 ? fmt::format("evaluation after step {}:", at.global_step)
                                            : std::string("evaluation:");
    if (r.has("top1")) line += fmt::format(" test top-1 {:.2f}%", 100.0 * r.number("top1"));
    if (r.has("loss")) line += fmt::format("  loss {:.4f}", r.number("loss"));
    line += other_fields(r);
    // Within fit() the epoch's line says where; on its own, how much was evaluated.
    const std::string images =
        !at.in_fit && r.has("images") ? fmt::format("{} images, ", static_cast<int64_t>(r.number("images"))) : "";
    return line + fmt::format("  ({}{:.1f} s)", images, r.number("seconds"));
  }
  std::string line = fmt::format("epoch {}/{}  step {}/{}", static_cast<int64_t>(r.number("epoch")), at.epochs,
                                 at.global_step, at.stop_step);
  if (r.has("loss")) line += fmt::format("  loss {:.4f}", r.number("loss"));
  if (r.has("top1")) line += fmt::format("  top-1 {:.2f}%", 100.0 * r.number("top1"));
  if (r.has("lr")) line += fmt::format("  lr {:.3e}", r.number("lr"));
  if (r.has("images_per_s")) line += fmt::format("  {:.0f} img/s", r.number("images_per_s"));
  line += other_fields(r);
  line += "  ETA " + format_duration(at.eta_seconds);
  if (at.show_loader_speed && r.has("data_wait_s")) {
    // "-" where the loader's threads did no work since the last line (the record then has no speed).
    const std::string speed =
        r.has("loader_images_per_cpu_s") ? fmt::format("{:.0f}", r.number("loader_images_per_cpu_s")) : "-";
    line += fmt::format("  data {} img/s/core, waited {:.1f} s", speed, r.number("data_wait_s"));
  }
  return line;
}

}  // namespace detail
}  // namespace colo
