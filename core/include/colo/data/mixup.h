#pragma once

#include <colo/data/batch.h>
#include <torch/arg.h>
#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace colo::data {

// How mixing parameters are shared (timm's Mixup `mode`): one lam and box for the whole batch;
// one per pair (element i and element B-1-i mix with each other alike); one per element.
enum class MixMode { kBatch, kPair, kElem };

const char* to_string(MixMode mode);
// "batch", "pair" or "elem"; std::invalid_argument naming the three otherwise.
MixMode mix_mode_from_string(const std::string& name);

// CutMix's box sizes as fractions of the image's height and width (timm's cutmix_minmax): with
// them the box is drawn from these ranges, not from lam, and cutmix_alpha is forced to 1.
struct CutmixMinMax {
  double min = 0.0;
  double max = 0.0;
};

// timm's Mixup (timm/data/mixup.py) and its defaults, but for the alphas, off until asked for.
struct MixupOptions {
  // Beta(alpha, alpha) for mixup's lam; mixup is on when > 0.
  TORCH_ARG(double, mixup_alpha) = 0.0;
  // Beta(alpha, alpha) for CutMix's lam (the share of the image left unpasted); on when > 0.
  TORCH_ARG(double, cutmix_alpha) = 0.0;
  TORCH_ARG(std::optional<CutmixMinMax>, cutmix_minmax) = std::nullopt;
  // Probability that a batch (or pair, or element) is mixed at all.
  TORCH_ARG(double, prob) = 1.0;
  // With both on: probability of CutMix rather than mixup.
  TORCH_ARG(double, switch_prob) = 0.5;
  TORCH_ARG(MixMode, mode) = MixMode::kBatch;
  // lam from the area CutMix actually pasted once the box is clipped by the image's borders.
  TORCH_ARG(bool, correct_lam) = true;
  // Folded into the soft targets: off = smoothing / C, on = 1 - smoothing + off (the criterion
  // must not smooth again).
  TORCH_ARG(double, label_smoothing) = 0.1;
  // From this epoch (counted from 0) on nothing is mixed and the targets are only smoothed (timm's
  // --mixup-off-epoch); 0: mixing never stops.
  TORCH_ARG(int64_t, off_epoch) = 0;

 public:  // TORCH_ARG leaves the section private
  bool enabled() const { return mixup_alpha() > 0 || cutmix_alpha() > 0 || cutmix_minmax().has_value(); }
  // The CutMix alpha a mixing uses: timm forces Beta(1, 1) when a box range is given (its lam is
  // then drawn but replaced by the box's area), whatever cutmix_alpha says.
  double effective_cutmix_alpha() const { return cutmix_minmax() ? 1.0 : cutmix_alpha(); }
};

// The random numbers a mixing takes, in the calls timm makes of NumPy's global generator:
// production draws them from a seed, a test injects the ones timm drew.
class MixupDraws {
 public:
  virtual ~MixupDraws() = default;
  virtual double uniform() = 0;                              // np.random.rand(): [0, 1)
  virtual double beta(double alpha) = 0;                     // np.random.beta(alpha, alpha)
  virtual int64_t integer(int64_t low, int64_t high) = 0;    // np.random.randint(low, high): [low, high)
};

// Draws that are a pure function of one seed (a counter-based stream over SplitMix64), the same
// on every platform: the loader seeds them from (seed, epoch, batch, data-parallel rank).
class SeededMixupDraws : public MixupDraws {
 public:
  explicit SeededMixupDraws(uint64_t seed) : seed_(seed) {}
  double uniform() override;
  double beta(double alpha) override;
  int64_t integer(int64_t low, int64_t high) override;

 private:
  double normal();
  double log_gamma_variate(double shape);  // log of a Gamma(shape, 1) variate
  uint64_t seed_;
  uint64_t counter_ = 0;
};

// Rows [top, bottom) and columns [left, right) pasted from the partner image.
struct CutBox {
  int64_t top = 0, bottom = 0, left = 0, right = 0;
};

// What the draws decided for one batch: one entry (batch mode), B/2 (pair: element B-1-i takes
// entry i) or B (elem). lam is after the box correction; 1 means unmixed. In pair and elem mode
// lam holds float32 values, as timm's arrays do.
struct MixParams {
  MixMode mode = MixMode::kBatch;
  std::vector<double> lam;
  std::vector<bool> cutmix;
  std::vector<CutBox> box;
};

// Mixup and CutMix on a batch, with timm's semantics: image i is mixed with image B-1-i (the
// batch flipped), and the targets become soft, smoothed one-hot labels mixed with the same lam:
//   target = lam * onehot_s(y) + (1 - lam) * onehot_s(y.flip(0))
// Given the same draws, images and targets equal timm's to the bit (tests/unit/mixup_test.cpp).
// Runs on the batch's device, in the caller's thread.
class Mixup {
 public:
  // Throws std::invalid_argument listing every option that is out of range.
  Mixup(MixupOptions options, int64_t num_classes);

  // The parameters for a batch of `batch_size` images of height x width (timm's
  // _params_per_batch / _params_per_elem and the boxes), drawn in timm's order. `enabled` false:
  // nothing is mixed and nothing is drawn (timm's mixup_enabled).
  MixParams draw(int64_t batch_size, int64_t height, int64_t width, MixupDraws& draws, bool enabled = true) const;

  // Mixes images [B, C, H, W] (float; in place where timm does) and returns the soft targets
  // float [B, num_classes] for int64 labels [B].
  torch::Tensor apply(const MixParams& params, torch::Tensor& images, const torch::Tensor& labels) const;

  // draw + apply: the batch's images mixed, its targets set (its labels kept).
  Batch operator()(Batch batch, MixupDraws& draws, bool enabled = true) const;

  // Whether mixing is on in `epoch` (off from off_epoch on).
  bool enabled_in_epoch(int64_t epoch) const { return options_.off_epoch() <= 0 || epoch < options_.off_epoch(); }
  // Empty when a batch of these sizes can be mixed, else why not (an odd batch; an image too small
  // for cutmix_minmax's range).
  std::string check_batch(int64_t batch_size, int64_t height, int64_t width) const;

  const MixupOptions& options() const { return options_; }
  int64_t num_classes() const { return num_classes_; }

 private:
  MixupOptions options_;
  int64_t num_classes_;
};

}  // namespace colo::data
