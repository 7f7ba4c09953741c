// plan_layouts: enumerate, predict, drop what does not fit, rank; and what to say when nothing fits.
#include <colo/planner/planner.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "units.h"

namespace colo::planner {
namespace {

// The first layout that fits `world` GPUs of the request's memory, if any (memory only).
std::optional<Layout> fits_at(const PlanRequest& request, int world) {
  PlanRequest bigger = request;
  bigger.world_size = world;
  StepModel model(bigger);
  const double usable = request.cluster.device.memory_gib * request.cluster.device.usable_memory_fraction * kGiB;
  for (const auto& layout : enumerate_layouts(bigger)) {
    try {
      const auto plan = model.memory_plan(layout);
      int64_t most = 0;
      for (const auto& rank : plan.ranks) most = std::max(most, rank.device_bytes());
      if (static_cast<double>(most) <= usable) return layout;
    } catch (const std::invalid_argument&) {
    }
  }
  return std::nullopt;
}

[[noreturn]] void nothing_fits(const StepModel& model, const PlanResult& result) {
  const auto& r = model.request();
  std::string message = fmt::format("no layout of {} (global batch {}, {}) fits {} {} of {:g} GiB", r.model.name,
                                    r.global_batch, r.precision, r.world_size,
                                    r.cluster.device.is_gpu ? "GPUs" : "CPU ranks", r.cluster.device.memory_gib);
  if (result.enumerated == 0) {
    message += fmt::format(": no layout splits the global batch {} over {} ranks; use a batch divisible by the "
                           "data-parallel sizes (e.g. a multiple of {})",
                           r.global_batch, r.world_size, r.world_size);
    throw NoLayoutFits(message);
  }
  const Rejected* smallest = nullptr;
  for (const auto& rejected : result.rejected) {
    if (rejected.device_bytes > 0 && (!smallest || rejected.device_bytes < smallest->device_bytes)) smallest = &rejected;
  }
  if (smallest) {
    message += fmt::format(".\nThe smallest layout, {}, needs {:.1f} GiB per {}: GPUs of at least {:.0f} GiB would "
                           "do (--gpu-memory-gib)",
                           smallest->layout.name(), static_cast<double>(smallest->device_bytes) / kGiB,
                           r.cluster.device.is_gpu ? "GPU" : "rank",
                           std::ceil(static_cast<double>(smallest->device_bytes) / kGiB /
                                     r.cluster.device.usable_memory_fraction));
  }
  for (int factor = 2; factor <= 64; factor *= 2) {
    const int world = r.world_size * factor;
    if (const auto layout = fits_at(r, world)) {
      message += fmt::format(", or {} GPUs of {:g} GiB (e.g. {})", world, r.cluster.device.memory_gib, layout->name());
      break;
    }
  }
  message += ".";
  throw NoLayoutFits(message);
}

}  // namespace

PlanResult plan_layouts(const StepModel& model) {
  const auto start = std::chrono::steady_clock::now();
  PlanResult result;
  const auto layouts = enumerate_layouts(model.request());
  result.enumerated = static_cast<int>(layouts.size());
  for (const auto& layout : layouts) {
    try {
      auto p = model.predict(layout);
      if (p.fits) {
        result.ranked.push_back(std::move(p));
      } else {
        result.rejected.push_back({layout, "does not fit: " + p.why_not, p.device_bytes});
      }
    } catch (const std::invalid_argument& e) {
      result.rejected.push_back({layout, fmt::format("rejected: {}", e.what()), 0});
    }
  }
  std::stable_sort(result.ranked.begin(), result.ranked.end(), [](const Prediction& a, const Prediction& b) {
    return a.images_per_second > b.images_per_second;
  });
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (result.ranked.empty()) nothing_fits(model, result);
  return result;
}

PlanResult plan_layouts(const PlanRequest& request) { return plan_layouts(StepModel(request)); }

}  // namespace colo::planner
