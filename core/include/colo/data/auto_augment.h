// timm's RandAugment and AutoAugment (timm/data/auto_augment.py, timm 1.0.31), from timm's own
// configuration strings: "rand-m9-mstd0.5-inc1" (rand_augment_transform) and "original"
// (auto_augment_transform with timm's `original` ImageNet policy, the AutoAugment paper's). The
// ops are pil_image_ops.h's, on the 8-bit image timm would hold; the draws come from each image's
// seed (our stream, not Python's: the same distributions, not the same draws).
#pragma once

#include <colo/data/pil_image_ops.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace colo::data {

// timm's op names (NAME_TO_OP / LEVEL_TO_ARG keys), in _RAND_TRANSFORMS' order with the variants.
enum class AugmentOpKind {
  kAutoContrast,
  kEqualize,
  kInvert,
  kRotate,
  kPosterize,
  kPosterizeIncreasing,
  kPosterizeOriginal,
  kSolarize,
  kSolarizeIncreasing,
  kSolarizeAdd,
  kColor,
  kColorIncreasing,
  kContrast,
  kContrastIncreasing,
  kBrightness,
  kBrightnessIncreasing,
  kSharpness,
  kSharpnessIncreasing,
  kShearX,
  kShearY,
  kTranslateXRel,
  kTranslateYRel,
};

const char* to_string(AugmentOpKind kind);  // timm's name, e.g. "PosterizeIncreasing"

// Whether timm's level function flips the argument's sign with probability 1/2 (_randomly_negate).
bool has_random_sign(AugmentOpKind kind);

// timm's LEVEL_TO_ARG: the op's argument at `magnitude` (already clipped to [0, 10]), negated
// when `negate` and the op has a random sign. Degrees, factors, thresholds, bits or fractions of
// the image's side; 0 for the ops without one.
double level_to_arg(AugmentOpKind kind, double magnitude, bool negate);

// timm's op (NAME_TO_OP) at `magnitude` with its sign; `resample` and `fill` for the geometric ops.
ByteImage apply_augment_op(const ByteImage& image, AugmentOpKind kind, double magnitude, bool negate, Resample resample,
                           const FillColor& fill);

// One op of a policy, as timm's AugmentOp: applied with probability `prob` at `magnitude`.
struct PolicyOp {
  AugmentOpKind kind;
  double prob;
  double magnitude;
};

// What a policy drew for one image: the ops it applies, in order.
struct DrawnOp {
  AugmentOpKind kind;
  double magnitude;  // after the noise and the clip to [0, 10]
  bool negate;       // read only where has_random_sign(kind)
  Resample resample;
};

class AugmentPolicy {
 public:
  // Parse timm's strings; throw std::invalid_argument saying what to write instead.
  //  rand-<sections>: m<0..10> magnitude (10), n<1..15> ops per image (2), p<0..1> per-op
  //    probability (0.5), mstd<x> magnitude noise std (0; above 100: uniform in [0, m]),
  //    inc<0|1> the increasing-severity ops (0). timm's mmax and t<set> are not supported.
  //  original[-mstd<x>]: timm's `original` ImageNet policy (25 sub-policies of two ops).
  static AugmentPolicy rand_augment(const std::string& config);
  static AugmentPolicy auto_augment(const std::string& config);

  // The ops for the image with this seed.
  std::vector<DrawnOp> draw(uint64_t seed) const;
  // draw(seed) applied in order.
  ByteImage apply(const ByteImage& image, uint64_t seed, const FillColor& fill) const;

  const std::string& config() const { return config_; }
  bool is_rand_augment() const { return !choices_.empty(); }
  const std::vector<AugmentOpKind>& choices() const { return choices_; }                    // RandAugment
  const std::vector<std::vector<PolicyOp>>& sub_policies() const { return sub_policies_; }  // AutoAugment
  int64_t num_layers() const { return num_layers_; }
  double prob() const { return prob_; }
  double magnitude() const { return magnitude_; }
  double magnitude_std() const { return magnitude_std_; }  // infinity: uniform in [0, magnitude]
  // One line for a run's printout.
  std::string description() const;

  // Resampling of the geometric ops: timm's default ("random" train interpolation) draws bilinear
  // or bicubic per op; set one to fix it.
  std::optional<Resample> resample;

 private:
  AugmentPolicy() = default;
  std::string config_;
  std::vector<AugmentOpKind> choices_;
  std::vector<std::vector<PolicyOp>> sub_policies_;
  int64_t num_layers_ = 2;
  double prob_ = 0.5;
  double magnitude_ = 10;
  double magnitude_std_ = 0;
};

// timm's img_mean fill from a normalisation mean in [0, 1]: round(255 * mean) per channel
// (create_transform's; (124, 116, 104) for ImageNet's mean); (128, 128, 128) without one.
FillColor fill_from_mean(const std::vector<double>& mean);

}  // namespace colo::data
