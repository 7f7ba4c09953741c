// Delayed float8 scaling's state (issue 39): amax::AmaxHistory keeps each step's amax, turns the
// last history_length of them into the next step's scale, drops and counts non-finite amaxes, and
// round-trips through its checkpoint state.
#include <colo/amp/amax_history.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

using colo::amp::AmaxHistory;
using colo::amp::AmaxReduction;
using colo::amp::DelayedScalingOptions;

constexpr double kE4m3Max = 448.0;

float scale_of(const AmaxHistory& h) { return h.scale().item<float>(); }

// A step: the operand's casts record `amax` (as a cast kernel would, a max into the slot), then the
// step ends.
void step(AmaxHistory& h, float amax) {
  h.current_amax().copy_(torch::maximum(h.current_amax(), torch::tensor(amax)));
  h.update();
}

std::vector<float> random_amaxes(int n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> exponent(-3.0f, 6.0f);
  std::vector<float> out;
  for (int i = 0; i < n; ++i) out.push_back(std::exp2(exponent(gen)));
  return out;
}

TEST(AmaxHistory, ScaleIsTheFormatMaxOverTheReducedHistoryOfEarlierSteps) {
  const auto amaxes = random_amaxes(40, 7);
  for (const int length : {1, 4, 16}) {
    for (const auto reduction : {AmaxReduction::kMax, AmaxReduction::kMostRecent}) {
      for (const int margin : {0, 2}) {
        SCOPED_TRACE(::testing::Message() << "length " << length << ", " << colo::amp::to_string(reduction)
                                          << ", margin " << margin);
        AmaxHistory h(DelayedScalingOptions().history_length(length).reduction(reduction).margin(margin), kE4m3Max);
        EXPECT_EQ(scale_of(h), 1.0f);  // no amax yet
        for (size_t i = 0; i < amaxes.size(); ++i) {
          step(h, amaxes[i]);
          // The amax the scale comes from: the newest, or the largest of the last `length`.
          float amax = amaxes[i];
          if (reduction == AmaxReduction::kMax) {
            const size_t first = i + 1 >= static_cast<size_t>(length) ? i + 1 - length : 0;
            amax = *std::max_element(amaxes.begin() + static_cast<long>(first), amaxes.begin() + static_cast<long>(i) + 1);
          }
          const float want = static_cast<float>(kE4m3Max / std::ldexp(1.0, margin)) / amax;
          ASSERT_NEAR(scale_of(h), want, 1e-6f * want) << "after step " << i;
        }
        // The history holds the last length - 1 amaxes, newest first, and a fresh zero slot.
        const auto history = h.history();
        EXPECT_EQ(history[0].item<float>(), 0.0f);
        for (int k = 1; k < length; ++k) EXPECT_EQ(history[k].item<float>(), amaxes[amaxes.size() - k]);
      }
    }
  }
}

TEST(AmaxHistory, NonFiniteAmaxesAreDroppedCountedAndKeepTheScale) {
  AmaxHistory h(DelayedScalingOptions().history_length(4), kE4m3Max);
  step(h, 3.0f);
  step(h, 5.0f);
  const float before = scale_of(h);
  EXPECT_FLOAT_EQ(before, 448.0f / 5.0f);
  step(h, std::numeric_limits<float>::infinity());
  EXPECT_EQ(scale_of(h), before);
  EXPECT_EQ(h.nonfinite_amaxes().item<int64_t>(), 1);
  h.current_amax().fill_(std::numeric_limits<float>::quiet_NaN());
  h.update();
  EXPECT_EQ(scale_of(h), before);
  EXPECT_EQ(h.nonfinite_amaxes().item<int64_t>(), 2);
  EXPECT_TRUE(torch::isfinite(h.history()).all().item<bool>());
  // The dropped steps count as 0: the 5 leaves the window after four steps, the 3 after three.
  step(h, 1.0f);
  EXPECT_FLOAT_EQ(scale_of(h), 448.0f / 5.0f);  // window 1, nan, inf, 5
  step(h, 1.0f);
  EXPECT_FLOAT_EQ(scale_of(h), 448.0f / 1.0f);  // window 1, 1, nan, inf
  // An all-zero operand keeps the scale too, without counting.
  step(h, 0.0f);
  step(h, 0.0f);
  step(h, 0.0f);
  step(h, 0.0f);
  EXPECT_FLOAT_EQ(scale_of(h), 448.0f);
  EXPECT_EQ(h.nonfinite_amaxes().item<int64_t>(), 2);
}

TEST(AmaxHistory, CurrentAmaxIsTheNewestSlotOfTheHistory) {
  AmaxHistory h(DelayedScalingOptions().history_length(3), 57344.0);
  h.current_amax().fill_(2.5f);
  EXPECT_EQ(h.history()[0].item<float>(), 2.5f);
  EXPECT_FLOAT_EQ(h.inverse_scale().item<float>(), 1.0f);
  h.update();
  EXPECT_FLOAT_EQ(h.inverse_scale().item<float>(), 2.5f / 57344.0f);
}

TEST(AmaxHistory, StateRoundTripsAndResumesExactly) {
  const auto amaxes = random_amaxes(12, 11);
  const auto options = DelayedScalingOptions().history_length(5);
  AmaxHistory run(options, kE4m3Max);
  for (int i = 0; i < 6; ++i) step(run, amaxes[static_cast<size_t>(i)]);
  step(run, std::numeric_limits<float>::infinity());
  AmaxHistory resumed(options, kE4m3Max);
  resumed.load_state(run.state());
  EXPECT_EQ(resumed.nonfinite_amaxes().item<int64_t>(), 1);
  for (int i = 7; i < 12; ++i) {
    step(run, amaxes[static_cast<size_t>(i)]);
    step(resumed, amaxes[static_cast<size_t>(i)]);
    ASSERT_EQ(scale_of(run), scale_of(resumed)) << "after step " << i;
    ASSERT_TRUE(torch::equal(run.history(), resumed.history()));
  }
  // The state is a copy: stepping the run does not move a state taken before.
  const auto saved = run.state();
  step(run, 1000.0f);
  EXPECT_FALSE(torch::equal(saved["scale"], run.scale()));

  AmaxHistory shorter(DelayedScalingOptions().history_length(4), kE4m3Max);
  try {
    shorter.load_state(run.state());
    FAIL() << "a history of another length loaded";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("a history of 5 steps, this run keeps 4 (history_length)"), std::string::npos)
        << e.what();
  }
  auto missing = run.state();
  missing.erase("scale");
  EXPECT_THROW(resumed.load_state(missing), std::invalid_argument);
}

TEST(AmaxHistory, OptionsAreCheckedAtTheirBounds) {
  EXPECT_NO_THROW(AmaxHistory(DelayedScalingOptions().history_length(1).margin(0), kE4m3Max));
  try {
    AmaxHistory(DelayedScalingOptions().history_length(0).margin(-1), kE4m3Max);
    FAIL() << "invalid options accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "delayed float8 scaling: history_length must be >= 1, got 0; margin must be >= 0, got -1");
  }
  EXPECT_EQ(colo::amp::parse_amax_reduction("most_recent"), AmaxReduction::kMostRecent);
  EXPECT_EQ(colo::amp::parse_amax_reduction("max"), AmaxReduction::kMax);
  EXPECT_THROW(colo::amp::parse_amax_reduction("mean"), std::invalid_argument);
}

}  // namespace
