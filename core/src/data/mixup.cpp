// Mixup and CutMix, following timm/data/mixup.py step by step (the order of the draws, NumPy's
// float32 arrays in pair and elem mode, the box's rounding), so that the same draws give the same
// batch to the bit.
#include <colo/data/mixup.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "seed_mix.h"

namespace colo::data {
namespace {

constexpr double kTwoPi = 6.283185307179586476925;

// timm's rand_bbox (margin 0) or rand_bbox_minmax, then the lam correction. `single`: lam is a
// NumPy float32 (pair and elem mode), so the box's size is computed in float32 as NumPy does.
CutBox cutmix_box(int64_t height, int64_t width, double& lam, bool single, const MixupOptions& o, MixupDraws& draws) {
  CutBox box;
  if (const auto& minmax = o.cutmix_minmax()) {
    const int64_t cut_h = draws.integer(static_cast<int64_t>(static_cast<double>(height) * minmax->min),
                                        static_cast<int64_t>(static_cast<double>(height) * minmax->max));
    const int64_t cut_w = draws.integer(static_cast<int64_t>(static_cast<double>(width) * minmax->min),
                                        static_cast<int64_t>(static_cast<double>(width) * minmax->max));
    box.top = draws.integer(0, height - cut_h + 1);
    box.left = draws.integer(0, width - cut_w + 1);
    box.bottom = box.top + cut_h;
    box.right = box.left + cut_w;
  } else {
    int64_t cut_h = 0, cut_w = 0;
    if (single) {
      const float ratio = std::sqrt(1.0f - static_cast<float>(lam));
      cut_h = static_cast<int64_t>(static_cast<float>(height) * ratio);
      cut_w = static_cast<int64_t>(static_cast<float>(width) * ratio);
    } else {
      const double ratio = std::sqrt(1.0 - lam);
      cut_h = static_cast<int64_t>(static_cast<double>(height) * ratio);
      cut_w = static_cast<int64_t>(static_cast<double>(width) * ratio);
    }
    const int64_t cy = draws.integer(0, height);
    const int64_t cx = draws.integer(0, width);
    box.top = std::clamp<int64_t>(cy - cut_h / 2, 0, height);
    box.bottom = std::clamp<int64_t>(cy + (cut_h + 1) / 2, 0, height);
    box.left = std::clamp<int64_t>(cx - cut_w / 2, 0, width);
    box.right = std::clamp<int64_t>(cx + (cut_w + 1) / 2, 0, width);
  }
  if (o.correct_lam() || o.cutmix_minmax()) {
    const auto area = static_cast<double>((box.bottom - box.top) * (box.right - box.left));
    lam = 1.0 - area / static_cast<double>(height * width);
  }
  if (single) lam = static_cast<float>(lam);
  return box;
}

// timm's mixup_target: smoothed one-hot labels mixed with the batch flipped. `lam` is a double
// (batch mode) or a float [B, 1] tensor (pair and elem mode).
template <typename Lam>
torch::Tensor mixed_targets(const torch::Tensor& labels, int64_t num_classes, const Lam& lam, double smoothing) {
  const double off = smoothing / static_cast<double>(num_classes);
  const double on = 1.0 - smoothing + off;
  const auto y1 = torch::full({labels.size(0), num_classes}, off, labels.options().dtype(torch::kFloat))
                      .scatter_(1, labels.to(torch::kLong).view({-1, 1}), on);
  const auto y2 = y1.flip(0);
  return y1 * lam + y2 * (1. - lam);
}

}  // namespace

const char* to_string(MixMode mode) {
  switch (mode) {
    case MixMode::kBatch:
      return "batch";
    case MixMode::kPair:
      return "pair";
    case MixMode::kElem:
      return "elem";
  }
  return "?";
}

MixMode mix_mode_from_string(const std::string& name) {
  if (name == "batch") return MixMode::kBatch;
  if (name == "pair") return MixMode::kPair;
  if (name == "elem") return MixMode::kElem;
  throw std::invalid_argument(fmt::format("mixup mode '{}': not one of batch, pair, elem", name));
}

// ---- SeededMixupDraws --------------------------------------------------------------------------

double SeededMixupDraws::uniform() {
  const uint64_t bits = detail::combine_seeds(seed_, counter_++);
  return static_cast<double>(bits >> 11) * 0x1p-53;
}

double SeededMixupDraws::normal() {
  const double u1 = 1.0 - uniform();  // (0, 1]
  const double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
}

// Marsaglia and Tsang's method, in logs: for shape < 1, Gamma(shape) = Gamma(shape + 1) * U^(1/shape),
// whose power underflows for small shapes (a lam of 0/0) unless kept as a logarithm.
double SeededMixupDraws::log_gamma_variate(double shape) {
  if (shape < 1.0) return log_gamma_variate(shape + 1.0) + std::log(1.0 - uniform()) / shape;
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    const double x = normal();
    double v = 1.0 + c * x;
    if (v <= 0.0) continue;
    v = v * v * v;
    const double u = uniform();
    if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return std::log(d * v);
  }
}

double SeededMixupDraws::beta(double alpha) {
  // X / (X + Y) for X, Y ~ Gamma(alpha): 1 / (1 + Y / X).
  const double log_x = log_gamma_variate(alpha);
  const double log_y = log_gamma_variate(alpha);
  return 1.0 / (1.0 + std::exp(log_y - log_x));
}

int64_t SeededMixupDraws::integer(int64_t low, int64_t high) {
  if (high <= low) throw std::invalid_argument(fmt::format("SeededMixupDraws::integer: empty range [{}, {})", low, high));
  const auto span = static_cast<double>(high - low);
  return std::min(high - 1, low + static_cast<int64_t>(uniform() * span));
}

// ---- Mixup -------------------------------------------------------------------------------------

Mixup::Mixup(MixupOptions options, int64_t num_classes) : options_(std::move(options)), num_classes_(num_classes) {
  std::vector<std::string> errors;
  const auto& o = options_;
  if (!o.enabled()) errors.emplace_back("neither mixup_alpha nor cutmix_alpha is positive, nor cutmix_minmax given");
  if (!(o.mixup_alpha() >= 0) || !std::isfinite(o.mixup_alpha()))
    errors.push_back(fmt::format("mixup_alpha {} must be >= 0 (0: off)", o.mixup_alpha()));
  if (!(o.cutmix_alpha() >= 0) || !std::isfinite(o.cutmix_alpha()))
    errors.push_back(fmt::format("cutmix_alpha {} must be >= 0 (0: off)", o.cutmix_alpha()));
  if (const auto& m = o.cutmix_minmax(); m && !(m->min > 0 && m->min < m->max && m->max <= 1)) {
    errors.push_back(fmt::format("cutmix_minmax ({}, {}) must satisfy 0 < min < max <= 1", m->min, m->max));
  }
  if (!(o.prob() >= 0 && o.prob() <= 1)) errors.push_back(fmt::format("prob {} must be in [0, 1]", o.prob()));
  if (!(o.switch_prob() >= 0 && o.switch_prob() <= 1))
    errors.push_back(fmt::format("switch_prob {} must be in [0, 1]", o.switch_prob()));
  if (!(o.label_smoothing() >= 0 && o.label_smoothing() < 1))
    errors.push_back(fmt::format("label_smoothing {} must be in [0, 1)", o.label_smoothing()));
  if (o.off_epoch() < 0) errors.push_back(fmt::format("off_epoch {} must be >= 0 (0: never off)", o.off_epoch()));
  if (num_classes < 1) errors.push_back(fmt::format("num_classes {} must be positive", num_classes));
  if (!errors.empty()) throw std::invalid_argument(fmt::format("Mixup: {}", fmt::join(errors, "; ")));
  options_.cutmix_alpha(options_.effective_cutmix_alpha());
}

std::string Mixup::check_batch(int64_t batch_size, int64_t height, int64_t width) const {
  std::vector<std::string> problems;
  if (batch_size % 2 != 0) {
    problems.push_back(fmt::format("a batch of {} images: mixup pairs image i with image B-1-i and needs an even "
                                   "batch (as timm's); make the per-rank batch even",
                                   batch_size));
  }
  if (const auto& m = options_.cutmix_minmax()) {
    for (const int64_t size : {height, width}) {
      if (static_cast<int64_t>(static_cast<double>(size) * m->min) >=
          static_cast<int64_t>(static_cast<double>(size) * m->max)) {
        problems.push_back(fmt::format("cutmix_minmax ({}, {}) leaves no box size to draw for {} pixels; widen it",
                                       m->min, m->max, size));
        break;
      }
    }
  }
  return fmt::format("{}", fmt::join(problems, "; "));
}

MixParams Mixup::draw(int64_t batch_size, int64_t height, int64_t width, MixupDraws& draws, bool enabled) const {
  if (const auto problem = check_batch(batch_size, height, width); !problem.empty()) {
    throw std::invalid_argument("Mixup: " + problem);
  }
  const auto& o = options_;
  const bool both = o.mixup_alpha() > 0 && o.cutmix_alpha() > 0;
  MixParams params;
  params.mode = o.mode();
  if (o.mode() == MixMode::kBatch) {
    double lam = 1.0;
    bool cutmix = false;
    if (enabled && draws.uniform() < o.prob()) {
      if (both) {
        cutmix = draws.uniform() < o.switch_prob();
        lam = cutmix ? draws.beta(o.cutmix_alpha()) : draws.beta(o.mixup_alpha());
      } else if (o.mixup_alpha() > 0) {
        lam = draws.beta(o.mixup_alpha());
      } else {
        cutmix = true;
        lam = draws.beta(o.cutmix_alpha());
      }
    }
    CutBox box;
    if (lam != 1.0 && cutmix) box = cutmix_box(height, width, lam, false, o, draws);
    params.lam = {lam};
    params.cutmix = {cutmix};
    params.box = {box};
    return params;
  }
  // _params_per_elem over n elements: whole arrays of each draw, in timm's order (both Beta
  // arrays are drawn where both are on: np.where evaluates both).
  const auto n = static_cast<size_t>(o.mode() == MixMode::kPair ? batch_size / 2 : batch_size);
  params.lam.assign(n, 1.0);
  params.cutmix.assign(n, false);
  params.box.assign(n, CutBox{});
  if (enabled) {
    std::vector<double> lam_mix(n);
    if (both) {
      for (size_t i = 0; i < n; ++i) params.cutmix[i] = draws.uniform() < o.switch_prob();
      std::vector<double> cut_lam(n);
      for (auto& lam : cut_lam) lam = draws.beta(o.cutmix_alpha());
      for (size_t i = 0; i < n; ++i) lam_mix[i] = draws.beta(o.mixup_alpha());
      for (size_t i = 0; i < n; ++i) {
        if (params.cutmix[i]) lam_mix[i] = cut_lam[i];
      }
    } else {
      const bool cutmix_only = o.mixup_alpha() <= 0;
      for (auto& lam : lam_mix) lam = draws.beta(cutmix_only ? o.cutmix_alpha() : o.mixup_alpha());
      if (cutmix_only) params.cutmix.assign(n, true);
    }
    for (size_t i = 0; i < n; ++i) {
      if (draws.uniform() < o.prob()) params.lam[i] = static_cast<float>(lam_mix[i]);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (params.lam[i] != 1.0 && params.cutmix[i]) params.box[i] = cutmix_box(height, width, params.lam[i], true, o, draws);
  }
  return params;
}

torch::Tensor Mixup::apply(const MixParams& params, torch::Tensor& images, const torch::Tensor& labels) const {
  const int64_t batch = images.size(0);
  const double smoothing = options_.label_smoothing();
  if (params.mode == MixMode::kBatch) {
    const double lam = params.lam.at(0);
    if (lam != 1.0) {
      if (params.cutmix.at(0)) {
        const CutBox& b = params.box.at(0);
        const auto source = images.flip(0);
        images.slice(2, b.top, b.bottom)
            .slice(3, b.left, b.right)
            .copy_(source.slice(2, b.top, b.bottom).slice(3, b.left, b.right));
      } else {
        const auto flipped = images.flip(0).mul_(1. - lam);
        images.mul_(lam).add_(flipped);
      }
    }
    return mixed_targets(labels, num_classes_, lam, smoothing);
  }
  // Per element: element i takes its partner B-1-i's pixels (the batch flipped); in pair mode
  // the partner shares i's parameters.
  const bool pair = params.mode == MixMode::kPair;
  const auto n = params.lam.size();
  if (static_cast<int64_t>(pair ? 2 * n : n) != batch) {
    throw std::invalid_argument(fmt::format("Mixup::apply: parameters for {} {} but {} images", n,
                                            pair ? "pairs" : "elements", batch));
  }
  std::vector<float> lam(static_cast<size_t>(batch));
  std::vector<uint8_t> blend(static_cast<size_t>(batch));
  std::vector<int64_t> bounds(static_cast<size_t>(4 * batch), 0);
  bool any_blend = false, any_cut = false;
  for (int64_t e = 0; e < batch; ++e) {
    const size_t i = pair && e >= batch / 2 ? static_cast<size_t>(batch - 1 - e) : static_cast<size_t>(e);
    const auto k = static_cast<size_t>(e);
    lam[k] = static_cast<float>(params.lam[i]);
    const bool mixed = params.lam[i] != 1.0;
    blend[k] = mixed && !params.cutmix[i];
    any_blend = any_blend || blend[k];
    if (mixed && params.cutmix[i]) {
      any_cut = true;
      const CutBox& b = params.box[i];
      bounds[4 * k] = b.top, bounds[4 * k + 1] = b.bottom, bounds[4 * k + 2] = b.left, bounds[4 * k + 3] = b.right;
    }
  }
  const auto device = images.device();
  const auto lam_t = torch::tensor(lam, torch::kFloat).to(device).view({batch, 1});
  if (any_blend || any_cut) {
    const auto source = images.flip(0);
    torch::Tensor out = images;
    if (any_blend) {
      const auto l = lam_t.view({batch, 1, 1, 1});
      const auto chosen = torch::tensor(blend, torch::kUInt8).to(torch::kBool).to(device).view({batch, 1, 1, 1});
      out = torch::where(chosen, images * l + source * (1 - l), images);
    }
    if (any_cut) {
      const auto b = torch::tensor(bounds, torch::kLong).to(device).view({batch, 4, 1, 1});
      const auto rows = torch::arange(images.size(2), torch::TensorOptions().dtype(torch::kLong).device(device))
                            .view({1, images.size(2), 1});
      const auto cols = torch::arange(images.size(3), torch::TensorOptions().dtype(torch::kLong).device(device))
                            .view({1, 1, images.size(3)});
      const auto inside = rows.ge(b.select(1, 0)) & rows.lt(b.select(1, 1)) & cols.ge(b.select(1, 2)) &
                          cols.lt(b.select(1, 3));  // [B, H, W]
      out = torch::where(inside.unsqueeze(1), source, out);
    }
    images = out;
  }
  return mixed_targets(labels, num_classes_, lam_t, smoothing);
}

Batch Mixup::operator()(Batch batch, MixupDraws& draws, bool enabled) const {
  const auto params = draw(batch.images.size(0), batch.images.size(2), batch.images.size(3), draws, enabled);
  batch.targets = apply(params, batch.images, batch.labels);
  return batch;
}

}  // namespace colo::data
