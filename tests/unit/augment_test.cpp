// timm's RandAugment, AutoAugment and RandomErasing (issue 38) against timm itself
// (tests/oracle/export_timm_augment.py, the CTest fixture oracle_timm_augment): every op at
// several magnitudes and both signs gives timm's bytes; the policies' and the erasing's own draws
// give timm's distributions (our stream is not Python's); timm's strings parse, bad ones are
// refused with what to write.
#include <colo/checkpoint/safetensors.h>
#include <colo/data/auto_augment.h>
#include <colo/data/image_transform.h>
#include <colo/data/random_erasing.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace colo::data {
namespace {

constexpr int64_t kSamples = 20000;  // draws on each side of a distribution comparison
const FillColor kFill{124, 116, 104};

const checkpoint::SafetensorsFile& reference() {
  static const checkpoint::SafetensorsFile file = [] {
    const std::string path = COLO_BINARY_DIR "/oracle/augment.reference.safetensors";
    if (::access(path.c_str(), F_OK) != 0) {
      throw std::runtime_error(path + " is missing: run `python3 " COLO_SOURCE_DIR
                                      "/tests/oracle/export_timm_augment.py --out " COLO_BINARY_DIR
                                      "/oracle` (CTest fixture oracle_timm_augment)");
    }
    return checkpoint::read_safetensors(path);
  }();
  return file;
}

nlohmann::json metadata(const std::string& key) { return nlohmann::json::parse(reference().metadata.at(key)); }

ByteImage byte_image(const torch::Tensor& t) {
  ByteImage image(t.size(0), t.size(1), t.size(2));
  const auto c = t.contiguous();
  std::copy(c.data_ptr<uint8_t>(), c.data_ptr<uint8_t>() + c.numel(), image.pixels.begin());
  return image;
}

AugmentOpKind kind_named(const std::string& name) {
  for (int k = 0; k <= static_cast<int>(AugmentOpKind::kTranslateYRel); ++k) {
    if (name == to_string(static_cast<AugmentOpKind>(k))) return static_cast<AugmentOpKind>(k);
  }
  throw std::invalid_argument("no op " + name);
}

// |a - b| within `sigmas` standard errors of the difference of two independent means.
void expect_close_means(double a, double var_a, double b, double var_b, int64_t n, const std::string& what) {
  const double se = std::sqrt(var_a / static_cast<double>(n) + var_b / static_cast<double>(n));
  EXPECT_LE(std::abs(a - b), 5 * se + 1e-12)
      << what << ": colo " << a << ", timm " << b << " (5 se = " << 5 * se << ")";
}

// Counts per op name (per image) of colo's draws and timm's log, compared op by op within five
// standard errors (each count per image is at most a few, its variance below its mean times 2).
void expect_same_op_frequencies(const std::vector<std::string>& names, const std::vector<int64_t>& colo_counts,
                                const torch::Tensor& timm_ops, const std::string& policy) {
  std::vector<int64_t> timm_counts(names.size(), 0);
  for (int64_t i = 0; i < timm_ops.size(0); ++i) ++timm_counts[static_cast<size_t>(timm_ops[i].item<int64_t>())];
  for (size_t k = 0; k < names.size(); ++k) {
    const double a = static_cast<double>(colo_counts[k]) / kSamples;
    const double b = static_cast<double>(timm_counts[k]) / kSamples;
    expect_close_means(a, 2 * a + 1e-4, b, 2 * b + 1e-4, kSamples, policy + " frequency of " + names[k]);
  }
}

TEST(RandAugmentOps, EveryOpGivesTimmsBytes) {
  const auto cases = metadata("ops");
  ASSERT_GT(cases.size(), 400u);
  int64_t geometric_pixels = 0;
  int64_t geometric_off = 0;
  for (size_t k = 0; k < cases.size(); ++k) {
    const auto& c = cases[k];
    const std::string name = c["name"];
    const ByteImage input = byte_image(reference().at("image." + c["image"].get<std::string>()));
    const AugmentOpKind kind = kind_named(name);
    const Resample resample = c["resample"] == "bicubic" ? Resample::kBicubic : Resample::kBilinear;
    const ByteImage out = apply_augment_op(input, kind, c["magnitude"], c["negate"], resample, kFill);
    const ByteImage expected = byte_image(reference().at("op" + std::to_string(k) + ".output"));
    ASSERT_EQ(out.pixels.size(), expected.pixels.size());
    int64_t off = 0;
    int max_diff = 0;
    for (size_t i = 0; i < out.pixels.size(); ++i) {
      const int d = std::abs(static_cast<int>(out.pixels[i]) - static_cast<int>(expected.pixels[i]));
      off += d != 0;
      max_diff = std::max(max_diff, d);
    }
    if (c["raised"]) {
      // timm with Pillow 13 raises on posterize to 0 bits (PosterizeIncreasing at 10, Posterize
      // below 2.5); colo keeps no bit (black), as Pillow before 10 and TensorFlow's AutoAugment
      // do (the oracle wrote black).
      EXPECT_TRUE(name == "PosterizeIncreasing" || name == "Posterize") << name;
    }
    const bool geometric = has_random_sign(kind) && name.find("Increasing") == std::string::npos;
    if (geometric) {
      geometric_pixels += static_cast<int64_t>(out.pixels.size());
      geometric_off += off;
    }
    // Every op to the byte: the same arithmetic as Pillow's C, the affine ops' pixel centres included.
    EXPECT_EQ(off, 0) << "case " << k << ": " << c.dump() << " differs in " << off << " of " << out.pixels.size()
                      << " pixels, by up to " << max_diff;
  }
  EXPECT_EQ(geometric_off, 0) << "of " << geometric_pixels << " geometric pixels";
}

TEST(RandAugmentOps, LevelsFollowTimm) {
  EXPECT_DOUBLE_EQ(level_to_arg(AugmentOpKind::kRotate, 9, true), -27.0);
  EXPECT_EQ(level_to_arg(AugmentOpKind::kPosterizeIncreasing, 9, false), 1);
  EXPECT_EQ(level_to_arg(AugmentOpKind::kSolarizeIncreasing, 9, false), 256 - 230);
  EXPECT_DOUBLE_EQ(level_to_arg(AugmentOpKind::kColorIncreasing, 10, true), 0.1);
  EXPECT_EQ(fill_from_mean({0.485, 0.456, 0.406}), (FillColor{124, 116, 104}));
}

TEST(RandAugmentPolicy, DrawsTimmsOpsAndMagnitudes) {
  const auto policy = AugmentPolicy::rand_augment("rand-m9-mstd0.5-inc1");
  const std::vector<std::string> names = metadata("ra_names");
  ASSERT_EQ(names.size(), policy.choices().size());
  for (size_t k = 0; k < names.size(); ++k) EXPECT_EQ(names[k], to_string(policy.choices()[k]));
  std::vector<int64_t> counts(names.size(), 0);
  std::vector<int64_t> applied(3, 0);
  double sum = 0, sum2 = 0, negated = 0, signed_ops = 0;
  int64_t ops = 0;
  for (int64_t s = 0; s < kSamples; ++s) {
    const auto drawn = policy.draw(static_cast<uint64_t>(s) * 7919 + 1);
    ++applied[drawn.size()];
    for (const DrawnOp& op : drawn) {
      const auto at = std::find(names.begin(), names.end(), to_string(op.kind)) - names.begin();
      ++counts[static_cast<size_t>(at)];
      sum += op.magnitude, sum2 += op.magnitude * op.magnitude, ++ops;
      if (has_random_sign(op.kind) && op.magnitude > 0) signed_ops += 1, negated += op.negate;
    }
  }
  expect_same_op_frequencies(names, counts, reference().at("ra.op"), "rand-m9-mstd0.5-inc1");

  // Ops per image: 0, 1 or 2, each op applied with probability 0.5.
  const auto timm_applied = reference().at("ra.applied");
  for (int64_t n = 0; n <= 2; ++n) {
    const double a = static_cast<double>(applied[static_cast<size_t>(n)]) / kSamples;
    const double b = (timm_applied == n).sum().item<double>() / kSamples;
    expect_close_means(a, a * (1 - a), b, b * (1 - b), kSamples, "images with " + std::to_string(n) + " ops");
  }
  // Magnitudes: N(9, 0.5) clipped to [0, 10].
  const auto m = reference().at("ra.magnitude");
  const double mean = sum / static_cast<double>(ops);
  const double var = sum2 / static_cast<double>(ops) - mean * mean;
  const double timm_mean = m.mean().item<double>();
  const double timm_var = m.var().item<double>();
  expect_close_means(mean, var, timm_mean, timm_var, std::min<int64_t>(ops, m.size(0)), "magnitude mean");
  EXPECT_NEAR(std::sqrt(var), std::sqrt(timm_var), 0.02) << "magnitude std";
  EXPECT_NEAR(m.max().item<double>(), 10.0, 1e-12);
  // The sign: negated half the time.
  const auto timm_negated = reference().at("ra.negated");
  const double colo_share = negated / signed_ops;
  EXPECT_NEAR(colo_share, 0.5, 5 * std::sqrt(0.25 / signed_ops));
  const auto timm_op = reference().at("ra.op");
  double timm_signed = 0;
  for (const auto& n : {"Rotate", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel", "ColorIncreasing",
                        "ContrastIncreasing", "BrightnessIncreasing", "SharpnessIncreasing"}) {
    timm_signed += (timm_op == (std::find(names.begin(), names.end(), n) - names.begin())).sum().item<double>();
  }
  EXPECT_NEAR(timm_negated.sum().item<double>() / timm_signed, colo_share, 5 * std::sqrt(0.25 / signed_ops) * 1.5);
}

TEST(AutoAugmentPolicy, DrawsTimmsOriginalPolicy) {
  const auto policy = AugmentPolicy::auto_augment("original");
  ASSERT_EQ(policy.sub_policies().size(), 25u);
  const std::vector<std::string> names = metadata("aa_names");
  std::vector<int64_t> counts(names.size(), 0);
  std::vector<int64_t> applied(3, 0);
  for (int64_t s = 0; s < kSamples; ++s) {
    const auto drawn = policy.draw(static_cast<uint64_t>(s) * 104729 + 3);
    ++applied[drawn.size()];
    for (const DrawnOp& op : drawn) {
      const auto at = std::find(names.begin(), names.end(), to_string(op.kind)) - names.begin();
      ASSERT_LT(static_cast<size_t>(at), names.size()) << to_string(op.kind);
      ++counts[static_cast<size_t>(at)];
      EXPECT_EQ(op.magnitude, std::round(op.magnitude)) << "no magnitude noise without mstd";
    }
  }
  expect_same_op_frequencies(names, counts, reference().at("aa.op"), "original");
  const auto timm_applied = reference().at("aa.applied");
  for (int64_t n = 0; n <= 2; ++n) {
    const double a = static_cast<double>(applied[static_cast<size_t>(n)]) / kSamples;
    const double b = (timm_applied == n).sum().item<double>() / kSamples;
    expect_close_means(a, a * (1 - a), b, b * (1 - b), kSamples, "images with " + std::to_string(n) + " ops");
  }
  // The magnitude of each (op, magnitude) pair: the same multiset of levels, e.g. Rotate at 8 and 9.
  const auto timm_m = reference().at("aa.magnitude");
  EXPECT_DOUBLE_EQ(timm_m.max().item<double>(), 9.0);
}

TEST(RandomErasing, RegionStatisticsMatchTimm) {
  const RandomErasingOptions options{0.25, ErasingMode::kConst};
  const auto boxes = reference().at("re.boxes");
  struct Stats {
    double erased = 0, area = 0, area2 = 0, aspect = 0, aspect2 = 0, top = 0, top2 = 0;
  };
  auto add = [](Stats& s, int64_t top, int64_t h, int64_t w) {
    const double area = static_cast<double>(h * w) / (48.0 * 64.0);
    const double aspect = std::log(static_cast<double>(h) / static_cast<double>(w));
    s.erased += 1, s.area += area, s.area2 += area * area, s.aspect += aspect, s.aspect2 += aspect * aspect;
    s.top += static_cast<double>(top), s.top2 += static_cast<double>(top * top);
  };
  Stats colo, timm;
  for (int64_t i = 0; i < kSamples; ++i) {
    if (const auto box = draw_erasing_box(options, 48, 64, static_cast<uint64_t>(i) * 31 + 5)) {
      EXPECT_LE(box->top + box->height, 48);
      EXPECT_LE(box->left + box->width, 64);
      add(colo, box->top, box->height, box->width);
    }
    const auto row = boxes[i];
    if (row[0].item<int64_t>() >= 0) add(timm, row[0].item<int64_t>(), row[2].item<int64_t>(), row[3].item<int64_t>());
  }
  const double p_colo = colo.erased / kSamples;
  const double p_timm = timm.erased / kSamples;
  expect_close_means(p_colo, p_colo * (1 - p_colo), p_timm, p_timm * (1 - p_timm), kSamples, "erased share");
  auto compare = [&](double Stats::*sum, double Stats::*sum2, const std::string& what) {
    const double a = colo.*sum / colo.erased;
    const double b = timm.*sum / timm.erased;
    const double va = colo.*sum2 / colo.erased - a * a;
    const double vb = timm.*sum2 / timm.erased - b * b;
    expect_close_means(a, va, b, vb, static_cast<int64_t>(std::min(colo.erased, timm.erased)), what);
  };
  compare(&Stats::area, &Stats::area2, "area share");
  compare(&Stats::aspect, &Stats::aspect2, "log aspect");
  compare(&Stats::top, &Stats::top2, "top");
}

TEST(RandomErasing, ErasesTimmsPixelsInAGivenBox) {
  for (const std::string mode : {"const", "rand", "pixel"}) {
    const auto input = reference().at("re." + mode + ".input");
    const auto expected = reference().at("re." + mode + ".output");
    const auto b = reference().at("re." + mode + ".box");
    const ErasingBox box{b[0].item<int64_t>(), b[1].item<int64_t>(), b[2].item<int64_t>(), b[3].item<int64_t>()};
    torch::Tensor out = input.clone();
    erase_box(out, box, erasing_mode_from_string(mode), 1);
    auto inside = torch::zeros_like(input, torch::kBool);
    inside.narrow(1, box.top, box.height).narrow(2, box.left, box.width).fill_(true);
    EXPECT_TRUE(torch::equal(out.masked_select(~inside), expected.masked_select(~inside))) << mode;
    const auto region = out.narrow(1, box.top, box.height).narrow(2, box.left, box.width);
    if (mode == "const") {
      EXPECT_TRUE(torch::equal(out, expected)) << "const erases to timm's zeros";
    } else if (mode == "rand") {
      // One normal value per channel (not timm's draw): constant within each channel.
      EXPECT_TRUE(torch::equal(region.amin({1, 2}), region.amax({1, 2})));
    } else {
      EXPECT_GT(region.std().item<double>(), 0.5);
    }
  }
}

TEST(AutoAugmentConfig, ParsesTimmsStrings) {
  const auto ra = AugmentPolicy::rand_augment("rand-m9-mstd0.5-inc1");
  EXPECT_EQ(ra.num_layers(), 2);
  EXPECT_EQ(ra.prob(), 0.5);
  EXPECT_EQ(ra.magnitude(), 9);
  EXPECT_EQ(ra.magnitude_std(), 0.5);
  EXPECT_EQ(to_string(ra.choices()[4]), std::string("PosterizeIncreasing"));
  const auto plain = AugmentPolicy::rand_augment("rand-n3-m7-p0.7");
  EXPECT_EQ(plain.num_layers(), 3);
  EXPECT_EQ(plain.prob(), 0.7);
  EXPECT_EQ(to_string(plain.choices()[4]), std::string("Posterize"));  // inc0: timm's default
  EXPECT_TRUE(std::isinf(AugmentPolicy::rand_augment("rand-mstd101").magnitude_std()));
  EXPECT_EQ(AugmentPolicy::auto_augment("original-mstd0.5").magnitude_std(), 0.5);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no std::invalid_argument)";
}

TEST(AutoAugmentConfig, RejectsBadStringsSayingWhatToWrite) {
  for (const std::string bad : {"rand-m99", "rand-m9-foo1", "rnd-m9", "rand-m9-inc2", "rand-m-1", "rand-p1.5",
                                "rand-m9-mmax12", "rand-m9-tweights"}) {
    const auto message = error_of([&] { AugmentPolicy::rand_augment(bad); });
    EXPECT_NE(message.find("rand-m9-mstd0.5-inc1"), std::string::npos) << bad << ": " << message;
    EXPECT_NE(message.find(bad), std::string::npos) << bad << ": " << message;
  }
  for (const std::string bad : {"v0", "originalr", "imagenet", "original-m9", "rand-m9"}) {
    const auto message = error_of([&] { AugmentPolicy::auto_augment(bad); });
    EXPECT_NE(message.find("original"), std::string::npos) << bad << ": " << message;
  }
  EXPECT_NE(error_of([] { erasing_mode_from_string("random"); }).find("const"), std::string::npos);
  // ImageTransform checks them with the rest of its options.
  ImageTransform::Options options;
  options.augmentation.rand_augment = "rand-m9";
  options.augmentation.auto_augment = "original";
  EXPECT_NE(error_of([&] { ImageTransform(options, {3, 8, 8}); }).find("give one of them"), std::string::npos);
  options.augmentation.auto_augment.clear();
  EXPECT_NE(error_of([&] { ImageTransform(options, {2, 8, 8}); }).find("1- or 3-channel"), std::string::npos);
  options.augmentation.random_erasing.probability = 1.5;
  EXPECT_NE(error_of([&] {
              ImageTransform(options, {3, 8, 8});
            }).find("probability must be in [0, 1]"),
            std::string::npos);
}

TEST(RandAugmentTransform, AugmentsEachImageFromItsSeedOnly) {
  ImageTransform::Options options;
  options.augmentation.rand_augment = "rand-m9-mstd0.5-inc1";
  options.augmentation.random_erasing = {0.5, ErasingMode::kRand};
  options.normalization = Normalization{{0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}};
  const ImageTransform transform(options, {3, 12, 10});
  const auto images = torch::randint(0, 256, {6, 3, 12, 10}).to(torch::kFloat) / 255;
  const std::vector<uint64_t> seeds{1, 2, 3, 4, 5, 6};
  const auto out = transform(images, seeds);
  // One image alone, with its seed, gives the same as in its batch.
  const auto single = transform(images.narrow(0, 3, 1), {4});
  EXPECT_TRUE(torch::equal(single[0], out[3]));
  // Something changed (RandAugment skips both ops a quarter of the time, erasing half).
  const auto plain = ImageTransform({{}, 0, options.normalization, 0}, {3, 12, 10})(images, {});
  EXPECT_FALSE(torch::equal(out, plain));
}

}  // namespace
}  // namespace colo::data
