// timm's RandAugment / AutoAugment: its level functions (the same expressions, in the same order,
// so the arguments agree to the bit), its op lists and its per-op draws (probability, magnitude
// noise, sign, resampling) from the image's own stream.
#include <colo/data/auto_augment.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "seeded_stream.h"

namespace colo::data {
namespace {

using K = AugmentOpKind;

constexpr double kLevelDenom = 10.0;  // timm's _LEVEL_DENOM

// timm's _RAND_TRANSFORMS and _RAND_INCREASING_TRANSFORMS.
const std::vector<K> kRandTransforms = {K::kAutoContrast, K::kEqualize,      K::kInvert,       K::kRotate,
                                        K::kPosterize,    K::kSolarize,      K::kSolarizeAdd,  K::kColor,
                                        K::kContrast,     K::kBrightness,    K::kSharpness,    K::kShearX,
                                        K::kShearY,       K::kTranslateXRel, K::kTranslateYRel};
const std::vector<K> kRandIncreasingTransforms = {K::kAutoContrast,
                                                  K::kEqualize,
                                                  K::kInvert,
                                                  K::kRotate,
                                                  K::kPosterizeIncreasing,
                                                  K::kSolarizeIncreasing,
                                                  K::kSolarizeAdd,
                                                  K::kColorIncreasing,
                                                  K::kContrastIncreasing,
                                                  K::kBrightnessIncreasing,
                                                  K::kSharpnessIncreasing,
                                                  K::kShearX,
                                                  K::kShearY,
                                                  K::kTranslateXRel,
                                                  K::kTranslateYRel};

// timm's auto_augment_policy_original: ImageNet's policy from the AutoAugment paper.
const std::vector<std::vector<PolicyOp>> kOriginalPolicy = {
    {{K::kPosterizeOriginal, 0.4, 8}, {K::kRotate, 0.6, 9}},
    {{K::kSolarize, 0.6, 5}, {K::kAutoContrast, 0.6, 5}},
    {{K::kEqualize, 0.8, 8}, {K::kEqualize, 0.6, 3}},
    {{K::kPosterizeOriginal, 0.6, 7}, {K::kPosterizeOriginal, 0.6, 6}},
    {{K::kEqualize, 0.4, 7}, {K::kSolarize, 0.2, 4}},
    {{K::kEqualize, 0.4, 4}, {K::kRotate, 0.8, 8}},
    {{K::kSolarize, 0.6, 3}, {K::kEqualize, 0.6, 7}},
    {{K::kPosterizeOriginal, 0.8, 5}, {K::kEqualize, 1.0, 2}},
    {{K::kRotate, 0.2, 3}, {K::kSolarize, 0.6, 8}},
    {{K::kEqualize, 0.6, 8}, {K::kPosterizeOriginal, 0.4, 6}},
    {{K::kRotate, 0.8, 8}, {K::kColor, 0.4, 0}},
    {{K::kRotate, 0.4, 9}, {K::kEqualize, 0.6, 2}},
    {{K::kEqualize, 0.0, 7}, {K::kEqualize, 0.8, 8}},
    {{K::kInvert, 0.6, 4}, {K::kEqualize, 1.0, 8}},
    {{K::kColor, 0.6, 4}, {K::kContrast, 1.0, 8}},
    {{K::kRotate, 0.8, 8}, {K::kColor, 1.0, 2}},
    {{K::kColor, 0.8, 8}, {K::kSolarize, 0.8, 7}},
    {{K::kSharpness, 0.4, 7}, {K::kInvert, 0.6, 8}},
    {{K::kShearX, 0.6, 5}, {K::kEqualize, 1.0, 9}},
    {{K::kColor, 0.4, 0}, {K::kEqualize, 0.6, 3}},
    {{K::kEqualize, 0.4, 7}, {K::kSolarize, 0.2, 4}},
    {{K::kSolarize, 0.6, 5}, {K::kAutoContrast, 0.6, 5}},
    {{K::kInvert, 0.6, 4}, {K::kEqualize, 1.0, 8}},
    {{K::kColor, 0.6, 4}, {K::kContrast, 1.0, 8}},
    {{K::kEqualize, 0.8, 8}, {K::kEqualize, 0.6, 3}},
};

constexpr const char* kRandExample =
    "write a timm RandAugment string such as \"rand-m9-mstd0.5-inc1\" (sections after \"rand\": m<0..10> "
    "magnitude, n<1..15> ops per image, p<0..1> probability per op, mstd<x> magnitude noise std, inc<0|1> "
    "increasing-severity ops)";
constexpr const char* kAutoExample =
    "write \"original\" (timm's `original` ImageNet AutoAugment policy), optionally with a magnitude noise "
    "std as in \"original-mstd0.5\"";

// A whole-string number, or nullopt.
std::optional<double> parse_number(const std::string& text, bool integer) {
  if (text.empty()) return std::nullopt;
  size_t used = 0;
  try {
    const double v = integer ? static_cast<double>(std::stoll(text, &used)) : std::stod(text, &used);
    if (used != text.size() || !std::isfinite(v)) return std::nullopt;
    return v;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// timm's split of a section into a key and the value from its first digit on.
std::pair<std::string, std::string> split_section(const std::string& section) {
  const auto digit = section.find_first_of("0123456789");
  if (digit == std::string::npos) return {section, ""};
  return {section.substr(0, digit), section.substr(digit)};
}

double parse_mstd(const std::string& what, const std::string& value, const char* example) {
  const auto v = parse_number(value, false);
  if (!v || *v < 0) {
    throw std::invalid_argument(
        fmt::format("{}: magnitude std \"mstd{}\" must be a number >= 0; {}", what, value, example));
  }
  // timm: above 100, uniform sampling in [0, magnitude].
  return *v > 100 ? std::numeric_limits<double>::infinity() : *v;
}

bool is_geometric(K kind) {
  return kind == K::kRotate || kind == K::kShearX || kind == K::kShearY || kind == K::kTranslateXRel ||
         kind == K::kTranslateYRel;
}

}  // namespace

const char* to_string(AugmentOpKind kind) {
  switch (kind) {
    case K::kAutoContrast:
      return "AutoContrast";
    case K::kEqualize:
      return "Equalize";
    case K::kInvert:
      return "Invert";
    case K::kRotate:
      return "Rotate";
    case K::kPosterize:
      return "Posterize";
    case K::kPosterizeIncreasing:
      return "PosterizeIncreasing";
    case K::kPosterizeOriginal:
      return "PosterizeOriginal";
    case K::kSolarize:
      return "Solarize";
    case K::kSolarizeIncreasing:
      return "SolarizeIncreasing";
    case K::kSolarizeAdd:
      return "SolarizeAdd";
    case K::kColor:
      return "Color";
    case K::kColorIncreasing:
      return "ColorIncreasing";
    case K::kContrast:
      return "Contrast";
    case K::kContrastIncreasing:
      return "ContrastIncreasing";
    case K::kBrightness:
      return "Brightness";
    case K::kBrightnessIncreasing:
      return "BrightnessIncreasing";
    case K::kSharpness:
      return "Sharpness";
    case K::kSharpnessIncreasing:
      return "SharpnessIncreasing";
    case K::kShearX:
      return "ShearX";
    case K::kShearY:
      return "ShearY";
    case K::kTranslateXRel:
      return "TranslateXRel";
    case K::kTranslateYRel:
      return "TranslateYRel";
  }
  return "?";
}

bool has_random_sign(AugmentOpKind kind) {
  return is_geometric(kind) || kind == K::kColorIncreasing || kind == K::kContrastIncreasing ||
         kind == K::kBrightnessIncreasing || kind == K::kSharpnessIncreasing;
}

double level_to_arg(AugmentOpKind kind, double level, bool negate) {
  auto sign = [negate](double v) { return negate ? -v : v; };
  // Python's int() of a non-negative float: truncation.
  auto trunc = [](double v) { return static_cast<double>(static_cast<int64_t>(v)); };
  switch (kind) {
    case K::kAutoContrast:
    case K::kEqualize:
    case K::kInvert:
      return 0;
    case K::kRotate:
      return sign((level / kLevelDenom) * 30.);
    case K::kPosterize:
      return trunc((level / kLevelDenom) * 4);
    case K::kPosterizeIncreasing:
      return 4 - trunc((level / kLevelDenom) * 4);
    case K::kPosterizeOriginal:
      return trunc((level / kLevelDenom) * 4) + 4;
    case K::kSolarize:
      return std::min(256.0, trunc((level / kLevelDenom) * 256));
    case K::kSolarizeIncreasing:
      return 256 - std::min(256.0, trunc((level / kLevelDenom) * 256));
    case K::kSolarizeAdd:
      return std::min(128.0, trunc((level / kLevelDenom) * 110));
    case K::kColor:
    case K::kContrast:
    case K::kBrightness:
    case K::kSharpness:
      return (level / kLevelDenom) * 1.8 + 0.1;
    case K::kColorIncreasing:
    case K::kContrastIncreasing:
    case K::kBrightnessIncreasing:
    case K::kSharpnessIncreasing:
      return std::max(0.1, 1.0 + sign((level / kLevelDenom) * .9));
    case K::kShearX:
    case K::kShearY:
      return sign((level / kLevelDenom) * 0.3);
    case K::kTranslateXRel:
    case K::kTranslateYRel:
      return sign((level / kLevelDenom) * 0.45);
  }
  return 0;
}

ByteImage apply_augment_op(const ByteImage& image, AugmentOpKind kind, double magnitude, bool negate, Resample resample,
                           const FillColor& fill) {
  const double arg = level_to_arg(kind, magnitude, negate);
  switch (kind) {
    case K::kAutoContrast:
      return pil::auto_contrast(image);
    case K::kEqualize:
      return pil::equalize(image);
    case K::kInvert:
      return pil::invert(image);
    case K::kRotate:
      return pil::rotate(image, arg, resample, fill);
    case K::kPosterize:
    case K::kPosterizeIncreasing:
    case K::kPosterizeOriginal:
      return pil::posterize(image, static_cast<int>(arg));
    case K::kSolarize:
    case K::kSolarizeIncreasing:
      return pil::solarize(image, static_cast<int>(arg));
    case K::kSolarizeAdd:
      return pil::solarize_add(image, static_cast<int>(arg));
    case K::kColor:
    case K::kColorIncreasing:
      return pil::color(image, arg);
    case K::kContrast:
    case K::kContrastIncreasing:
      return pil::contrast(image, arg);
    case K::kBrightness:
    case K::kBrightnessIncreasing:
      return pil::brightness(image, arg);
    case K::kSharpness:
    case K::kSharpnessIncreasing:
      return pil::sharpness(image, arg);
    case K::kShearX:
      return pil::affine(image, {1, arg, 0, 0, 1, 0}, resample, fill);
    case K::kShearY:
      return pil::affine(image, {1, 0, 0, arg, 1, 0}, resample, fill);
    case K::kTranslateXRel:
      return pil::affine(image, {1, 0, arg * static_cast<double>(image.width), 0, 1, 0}, resample, fill);
    case K::kTranslateYRel:
      return pil::affine(image, {1, 0, 0, 0, 1, arg * static_cast<double>(image.height)}, resample, fill);
  }
  return image;
}

AugmentPolicy AugmentPolicy::rand_augment(const std::string& config) {
  const std::string what = fmt::format("rand_augment \"{}\"", config);
  AugmentPolicy policy;
  policy.config_ = config;
  bool increasing = false;  // timm's default: inc0
  std::vector<std::string> sections;
  for (size_t begin = 0;;) {
    const size_t dash = config.find('-', begin);
    sections.push_back(config.substr(begin, dash == std::string::npos ? std::string::npos : dash - begin));
    if (dash == std::string::npos) break;
    begin = dash + 1;
  }
  if (sections[0] != "rand") {
    throw std::invalid_argument(fmt::format("{}: must start with \"rand\"; {}", what, kRandExample));
  }
  for (size_t i = 1; i < sections.size(); ++i) {
    const auto [key, value] = split_section(sections[i]);
    auto bad = [&](const std::string& why) {
      return std::invalid_argument(fmt::format("{}: section \"{}\" {}; {}", what, sections[i], why, kRandExample));
    };
    if (key == "m") {
      const auto v = parse_number(value, true);
      if (!v || *v < 0 || *v > kLevelDenom) throw bad("needs an integer magnitude in [0, 10]");
      policy.magnitude_ = *v;
    } else if (key == "n") {
      const auto v = parse_number(value, true);
      if (!v || *v < 1 || *v > 15) throw bad("needs an integer number of ops per image in [1, 15]");
      policy.num_layers_ = static_cast<int64_t>(*v);
    } else if (key == "p") {
      const auto v = parse_number(value, false);
      if (!v || *v < 0 || *v > 1) throw bad("needs a probability in [0, 1]");
      policy.prob_ = *v;
    } else if (key == "mstd") {
      policy.magnitude_std_ = parse_mstd(what, value, kRandExample);
    } else if (key == "inc") {
      const auto v = parse_number(value, true);
      if (!v || (*v != 0 && *v != 1)) throw bad("needs 0 or 1");
      increasing = *v == 1;
    } else if (key == "mmax" || key.rfind('t', 0) == 0) {
      throw bad("is a timm option colo does not support (mmax, t<set>)");
    } else {
      throw bad("is not a RandAugment option");
    }
  }
  policy.choices_ = increasing ? kRandIncreasingTransforms : kRandTransforms;
  return policy;
}

AugmentPolicy AugmentPolicy::auto_augment(const std::string& config) {
  const std::string what = fmt::format("auto_augment \"{}\"", config);
  AugmentPolicy policy;
  policy.config_ = config;
  const size_t dash = config.find('-');
  const std::string name = config.substr(0, dash);
  if (name == "rand") {
    throw std::invalid_argument(fmt::format(
        "{}: a RandAugment string goes into rand_augment (--rand-augment), not auto_augment; for AutoAugment {}", what,
        kAutoExample));
  }
  if (name == "v0" || name == "v0r" || name == "originalr" || name == "3a") {
    throw std::invalid_argument(
        fmt::format("{}: timm's policy \"{}\" is not implemented in colo; {}", what, name, kAutoExample));
  }
  if (name != "original") {
    throw std::invalid_argument(fmt::format("{}: unknown AutoAugment policy \"{}\"; {}", what, name, kAutoExample));
  }
  for (size_t begin = dash; begin != std::string::npos;) {
    const size_t next = config.find('-', begin + 1);
    const std::string section =
        config.substr(begin + 1, next == std::string::npos ? std::string::npos : next - begin - 1);
    begin = next;
    const auto [key, value] = split_section(section);
    if (key != "mstd") {
      throw std::invalid_argument(
          fmt::format("{}: section \"{}\" is not an AutoAugment option; {}", what, section, kAutoExample));
    }
    policy.magnitude_std_ = parse_mstd(what, value, kAutoExample);
  }
  policy.sub_policies_ = kOriginalPolicy;
  return policy;
}

std::vector<DrawnOp> AugmentPolicy::draw(uint64_t seed) const {
  detail::SeededStream stream(seed);
  std::vector<PolicyOp> ops;
  if (is_rand_augment()) {
    // RandAugment: num_layers ops with replacement (np.random.choice, replace=True).
    const auto n = static_cast<int64_t>(choices_.size());
    for (int64_t i = 0; i < num_layers_; ++i) {
      ops.push_back({choices_[static_cast<size_t>(stream.index(n))], prob_, magnitude_});
    }
  } else {
    ops = sub_policies_[static_cast<size_t>(stream.index(static_cast<int64_t>(sub_policies_.size())))];
  }
  std::vector<DrawnOp> drawn;
  for (const PolicyOp& op : ops) {
    // AugmentOp.__call__: skipped when random() > prob; the magnitude's noise, clipped to [0, 10].
    if (op.prob < 1.0 && stream.uniform() > op.prob) continue;
    double magnitude = op.magnitude;
    if (std::isinf(magnitude_std_)) {
      magnitude = stream.uniform(0, magnitude);
    } else if (magnitude_std_ > 0) {
      magnitude = stream.normal(magnitude, magnitude_std_);
    }
    magnitude = std::max(0.0, std::min(magnitude, kLevelDenom));
    const bool negate = has_random_sign(op.kind) && stream.uniform() > 0.5;
    Resample resample = Resample::kBilinear;
    if (is_geometric(op.kind)) {
      resample = this->resample ? *this->resample : (stream.uniform() < 0.5 ? Resample::kBilinear : Resample::kBicubic);
    }
    drawn.push_back({op.kind, magnitude, negate, resample});
  }
  return drawn;
}

ByteImage AugmentPolicy::apply(const ByteImage& image, uint64_t seed, const FillColor& fill) const {
  ByteImage out = image;
  for (const DrawnOp& op : draw(seed)) out = apply_augment_op(out, op.kind, op.magnitude, op.negate, op.resample, fill);
  return out;
}

std::string AugmentPolicy::description() const {
  const std::string noise = magnitude_std_ == 0          ? ""
                            : std::isinf(magnitude_std_) ? ", magnitude uniform in [0, m]"
                                                         : fmt::format(", magnitude noise std {:g}", magnitude_std_);
  if (is_rand_augment()) {
    return fmt::format("RandAugment {}: {} of {} ops per image, each with probability {:g} at magnitude {:g}{}",
                       config_, num_layers_, choices_.size(), prob_, magnitude_, noise);
  }
  return fmt::format("AutoAugment {}: one of timm's {} `original` ImageNet sub-policies per image{}", config_,
                     sub_policies_.size(), noise);
}

FillColor fill_from_mean(const std::vector<double>& mean) {
  FillColor fill{128, 128, 128};  // timm's _FILL
  for (size_t c = 0; c < std::min<size_t>(3, mean.size()); ++c) {
    // Python's round(): halves to even, as nearbyint in the default rounding mode.
    fill[c] = static_cast<uint8_t>(std::clamp(std::nearbyint(255.0 * mean[c]), 0.0, 255.0));
  }
  return fill;
}

}  // namespace colo::data
