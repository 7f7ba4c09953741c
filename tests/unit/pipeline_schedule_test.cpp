// core/pipeline's schedules as data: the action type and its text form, the four generators'
// orders (written out by hand for small shapes), validate()'s findings on broken schedules, and
// the printouts. Schedules by name: pipeline_schedule_registry_test.cpp; as text:
// pipeline_schedule_text_test.cpp. The dry run of every generated schedule is in
// pipeline_simulator_test.cpp.
#include <colo/pipeline/simulator.h>
#include <colo/pipeline/action.h>
#include <colo/pipeline/schedule.h>
#include <colo/pipeline/schedule_format.h>
#include <colo/pipeline/schedule_generators.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "error_of.h"

namespace colo::pipeline {
namespace {

using colo::testing::error_of;

std::vector<std::string> rank_texts(const Schedule& schedule) {
  std::vector<std::string> out;
  for (const auto& actions : schedule.actions) out.push_back(format_actions(actions));
  return out;
}

TEST(PipelineAction, TextFormRoundTrips) {
  const Action forward{1, ActionKind::kForward, 3};
  EXPECT_EQ(forward.str(), "1F3");
  EXPECT_EQ(Action::parse("1F3"), forward);
  EXPECT_EQ(Action::parse("0B2"), (Action{0, ActionKind::kBackward, 2}));
  EXPECT_EQ(Action::parse("2W0"), (Action{2, ActionKind::kWeight, 0}));
  EXPECT_EQ(Action::parse("  12W105\t"), (Action{12, ActionKind::kWeight, 105}));
  for (const auto& text : {"0F0", "7B12", "31W4"}) EXPECT_EQ(Action::parse(text).str(), text);
}

TEST(PipelineAction, ParseNamesTheTextAndTheExpectedForm) {
  for (const auto& bad : {"", "F3", "1X3", "1F", "1F3x", "-1F3", "1 F3", "1f3", "99999999999F0"}) {
    const auto message = error_of<std::invalid_argument>([&] { Action::parse(bad); });
    EXPECT_NE(message.find(std::string("'") + bad + "'"), std::string::npos) << message;
    EXPECT_NE(message.find("<stage><F|B|W><microbatch>"), std::string::npos) << message;
  }
  EXPECT_NE(error_of<std::invalid_argument>([] { Action::parse("1X3"); }).find("'X' is not a kind"), std::string::npos);
}

TEST(PipelineAction, EqualityAndOrdering) {
  const Action a{0, ActionKind::kForward, 1};
  const Action b{0, ActionKind::kBackward, 0};
  const Action c{1, ActionKind::kForward, 0};
  EXPECT_NE(a, b);
  EXPECT_EQ(a, (Action{0, ActionKind::kForward, 1}));
  // (stage, microbatch, kind): 0B0 < 0F1 < 1F0.
  std::set<Action> sorted{c, a, b};
  EXPECT_EQ(format_actions({sorted.begin(), sorted.end()}), "0B0 0F1 1F0");
  EXPECT_LT((Action{0, ActionKind::kForward, 0}), (Action{0, ActionKind::kBackward, 0}));
  EXPECT_LT((Action{0, ActionKind::kBackward, 0}), (Action{0, ActionKind::kWeight, 0}));
}

TEST(PipelineAction, ListsRoundTrip) {
  const std::vector<Action> actions = {{0, ActionKind::kForward, 0},
                                       {0, ActionKind::kForward, 1},
                                       {0, ActionKind::kBackward, 0},
                                       {2, ActionKind::kWeight, 10}};
  EXPECT_EQ(format_actions(actions), "0F0 0F1 0B0 2W10");
  EXPECT_EQ(parse_actions(format_actions(actions)), actions);
  EXPECT_EQ(parse_actions(" 0F0, 0F1,0B0   2W10 "), actions);
  EXPECT_TRUE(parse_actions("").empty());
  const auto message = error_of<std::invalid_argument>([] { parse_actions("0F0 0F1 0Q0"); });
  EXPECT_NE(message.find("action 2 of the list"), std::string::npos) << message;
}

TEST(PipelineSchedule, GPipeRunsEveryForwardThenEveryBackward) {
  const auto schedule = gpipe_schedule(ScheduleShape(2, 3));
  EXPECT_FALSE(schedule.split_backward);
  EXPECT_EQ(rank_texts(schedule), (std::vector<std::string>{"0F0 0F1 0F2 0B0 0B1 0B2", "1F0 1F1 1F2 1B0 1B1 1B2"}));
  // One rank: nothing to fill, so no reason to hold every activation.
  EXPECT_EQ(rank_texts(gpipe_schedule(ScheduleShape(1, 3))), (std::vector<std::string>{"0F0 0B0 0F1 0B1 0F2 0B2"}));
}

TEST(PipelineSchedule, OneFOneBWarmsUpThenAlternates) {
  EXPECT_EQ(rank_texts(one_f_one_b_schedule(ScheduleShape(4, 6))),
            (std::vector<std::string>{
                "0F0 0F1 0F2 0F3 0B0 0F4 0B1 0F5 0B2 0B3 0B4 0B5", "1F0 1F1 1F2 1B0 1F3 1B1 1F4 1B2 1F5 1B3 1B4 1B5",
                "2F0 2F1 2B0 2F2 2B1 2F3 2B2 2F4 2B3 2F5 2B4 2B5", "3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3F4 3B4 3F5 3B5"}));
  EXPECT_EQ(rank_texts(one_f_one_b_schedule(ScheduleShape(1, 2))), (std::vector<std::string>{"0F0 0B0 0F1 0B1"}));
  // Fewer microbatches than stages: the warm-up is cut to m.
  EXPECT_EQ(rank_texts(one_f_one_b_schedule(ScheduleShape(4, 2))),
            (std::vector<std::string>{"0F0 0F1 0B0 0B1", "1F0 1F1 1B0 1B1", "2F0 2F1 2B0 2B1", "3F0 3B0 3F1 3B1"}));
}

TEST(PipelineSchedule, InterleavedFollowsMegatronsChunkOrder) {
  const auto schedule = interleaved_schedule(ScheduleShape(2, 4).chunks(2));
  EXPECT_EQ(schedule.num_stages(), 4);
  // Rank 0 holds stages 0 and 2, rank 1 stages 1 and 3. Microbatches 0-1 go through chunk 0, then
  // chunk 1, then microbatches 2-3 do; backwards walk the chunks in reverse. Warm-up: 3 and 2.
  EXPECT_EQ(rank_texts(schedule),
            (std::vector<std::string>{"0F0 0F1 2F0 2F1 2B0 0F2 2B1 0F3 0B0 2F2 0B1 2F3 2B2 2B3 0B2 0B3",
                                      "1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3"}));
}

TEST(PipelineSchedule, ZeroBubbleDefersWeightGradientsOfLaterRanks) {
  const auto schedule = zero_bubble_h1_schedule(ScheduleShape(3, 4));
  EXPECT_TRUE(schedule.split_backward);
  // Rank r: min(2 - r, m) forwards; r F-B pairs without W; F-B-W; B-W; the deferred W's.
  EXPECT_EQ(rank_texts(schedule), (std::vector<std::string>{"0F0 0F1 0F2 0B0 0W0 0F3 0B1 0W1 0B2 0W2 0B3 0W3",
                                                            "1F0 1F1 1B0 1F2 1B1 1W0 1F3 1B2 1W1 1B3 1W2 1W3",
                                                            "2F0 2B0 2F1 2B1 2F2 2B2 2W0 2F3 2B3 2W1 2W2 2W3"}));
  EXPECT_EQ(rank_texts(zero_bubble_h1_schedule(ScheduleShape(1, 2))),
            (std::vector<std::string>{"0F0 0B0 0W0 0F1 0B1 0W1"}));
  // Fewer microbatches than stages.
  EXPECT_EQ(rank_texts(zero_bubble_h1_schedule(ScheduleShape(3, 1))),
            (std::vector<std::string>{"0F0 0B0 0W0", "1F0 1B0 1W0", "2F0 2B0 2W0"}));
}

// How many microbatches each stage holds at once: a CUDA-graphed stage's capture slots.
TEST(PipelineSchedule, PeakInFlightCountsEachStagesHeldMicrobatches) {
  const auto peaks = [](const Schedule& schedule) {
    std::vector<int> out;
    for (int s = 0; s < schedule.num_stages(); ++s) out.push_back(peak_in_flight(schedule, s));
    return out;
  };
  EXPECT_EQ(peaks(one_f_one_b_schedule(ScheduleShape(4, 6))), (std::vector<int>{4, 3, 2, 1}));
  EXPECT_EQ(peaks(one_f_one_b_schedule(ScheduleShape(4, 2))), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(peaks(gpipe_schedule(ScheduleShape(2, 3))), (std::vector<int>{3, 3}));
  EXPECT_EQ(peaks(gpipe_schedule(ScheduleShape(1, 3))), (std::vector<int>{1}));
  // Per virtual stage, not per rank: rank 0's stages 0 and 2 need 4 and 2, though the rank never
  // holds more than 4 microbatches at once (their peaks come at different times).
  EXPECT_EQ(peaks(interleaved_schedule(ScheduleShape(2, 4).chunks(2))), (std::vector<int>{4, 3, 2, 1}));
  // B ends what a microbatch holds for the forward's activations; W comes later and needs none of them.
  EXPECT_EQ(peaks(zero_bubble_h1_schedule(ScheduleShape(3, 4))), (std::vector<int>{3, 2, 1}));
  EXPECT_EQ(peak_in_flight(forward_only_schedule(ScheduleShape(2, 4)), 0), 0);
  EXPECT_EQ(peak_in_flight(one_f_one_b_schedule(ScheduleShape(2, 4)), 2), 0);
}

// Each generator refuses a shape it cannot make (the registry's rules, with hints naming the
// other schedules: pipeline_schedule_registry_test.cpp).
TEST(PipelineSchedule, GeneratorsRefuseShapesTheyCannotMake) {
  EXPECT_THROW(zero_bubble_h1_schedule(ScheduleShape(2, 0)), std::invalid_argument);
  EXPECT_THROW(interleaved_schedule(ScheduleShape(2, 4)), std::invalid_argument);
  EXPECT_THROW(one_f_one_b_schedule(ScheduleShape(2, 4).chunks(2)), std::invalid_argument);
  EXPECT_THROW(gpipe_schedule(ScheduleShape(0, 4)), std::invalid_argument);
}

// validate() on schedules broken by hand: each names what is wrong.
Schedule one_f_one_b(int pp, int m) { return one_f_one_b_schedule(ScheduleShape(pp, m)); }

TEST(PipelineValidate, AcceptsEveryGeneratedSchedule) {
  for (int pp : {1, 2, 3, 4, 8}) {
    for (int m : {1, 2, 3, 4, 8, 16}) {
      EXPECT_NO_THROW(validate(gpipe_schedule(ScheduleShape(pp, m))));
      EXPECT_NO_THROW(validate(one_f_one_b_schedule(ScheduleShape(pp, m))));
      EXPECT_NO_THROW(validate(zero_bubble_h1_schedule(ScheduleShape(pp, m))));
      for (int chunks : {2, 3, 4}) {
        if (pp >= 2 && m % pp == 0) {
          EXPECT_NO_THROW(validate(interleaved_schedule(ScheduleShape(pp, m).chunks(chunks))));
        }
      }
    }
  }
}

TEST(PipelineValidate, FindsAMissingBackward) {
  auto schedule = one_f_one_b(2, 2);
  schedule.actions[1] = parse_actions("1F0 1B0 1F1");
  const auto message = error_of<ScheduleError>([&] { validate(schedule); });
  EXPECT_NE(message.find("1B1 is missing"), std::string::npos) << message;
  EXPECT_NE(message.find("pp=2, microbatches=2, chunks=1"), std::string::npos) << message;
}

TEST(PipelineValidate, FindsAnActionOnTheWrongRank) {
  auto schedule = one_f_one_b(2, 2);
  schedule.actions[0] = parse_actions("0F0 0F1 0B0 0B1 1F1");
  schedule.actions[1] = parse_actions("1F0 1B0 1B1");
  const auto message = error_of<ScheduleError>([&] { validate(schedule); });
  EXPECT_NE(message.find("rank 0 action 4 (1F1): stage 1 runs on rank 1"), std::string::npos) << message;
}

TEST(PipelineValidate, FindsDuplicatesAndABackwardBeforeItsForward) {
  auto schedule = one_f_one_b(2, 2);
  schedule.actions[0] = parse_actions("0F0 0B1 0F1 0B0 0F0");
  const auto message = error_of<ScheduleError>([&] { validate(schedule); });
  EXPECT_NE(message.find("rank 0 action 4 (0F0): a duplicate of rank 0 action 0"), std::string::npos) << message;
  EXPECT_NE(message.find("rank 0: 0B1 (action 1) runs before 0F1 (action 2)"), std::string::npos) << message;
}

TEST(PipelineValidate, FindsWeightGradientsWhereTheyDoNotBelong) {
  auto plain = one_f_one_b(1, 1);
  plain.actions[0] = parse_actions("0F0 0B0 0W0");
  EXPECT_NE(error_of<ScheduleError>([&] { validate(plain); }).find("a W action in a schedule that does not split"),
            std::string::npos);

  auto split = zero_bubble_h1_schedule(ScheduleShape(1, 2));
  split.actions[0] = parse_actions("0F0 0B0 0W0 0F1 0W1 0B1");  // W before its B
  auto message = error_of<ScheduleError>([&] { validate(split); });
  EXPECT_NE(message.find("0W1 (action 4) runs before 0B1 (action 5)"), std::string::npos) << message;
  split.actions[0] = parse_actions("0F0 0B0 0W0 0F1 0B1");
  message = error_of<ScheduleError>([&] { validate(split); });
  EXPECT_NE(message.find("0W1 is missing (every stage and microbatch needs F, B and W)"), std::string::npos) << message;
}

TEST(PipelineValidate, FindsOutOfRangeActionsAndBadShapes) {
  auto schedule = one_f_one_b(2, 2);
  schedule.actions[0].push_back({4, ActionKind::kForward, 0});
  schedule.actions[1].push_back({1, ActionKind::kForward, 5});
  auto message = error_of<ScheduleError>([&] { validate(schedule); });
  EXPECT_NE(message.find("stage 4 is out of range [0, 2)"), std::string::npos) << message;
  EXPECT_NE(message.find("microbatch 5 is out of range [0, 2)"), std::string::npos) << message;

  schedule = one_f_one_b(2, 2);
  schedule.actions.pop_back();
  message = error_of<ScheduleError>([&] { validate(schedule); });
  EXPECT_NE(message.find("action lists for 1 ranks, not pp=2"), std::string::npos) << message;

  Schedule one_rank_two_chunks(ScheduleShape(1, 1).chunks(2));
  message = error_of<ScheduleError>([&] { validate(one_rank_two_chunks); });
  EXPECT_NE(message.find("chunks > 1 needs pp >= 2"), std::string::npos) << message;
}

// Each range check at its boundary: for a bound n (stages or microbatches), n - 1 and 0 are in
// range, n, n + 1 and -1 are not. An index of n that got past the check would be counted in
// another stage's slot, or past the end of the table.
TEST(PipelineValidate, RangeChecksHoldAtTheirBoundaries) {
  // pp=2 (stages 0, 1) and 3 microbatches; extra actions on the rank that owns their stage.
  const auto with_extra = [](const Action& extra) {
    auto schedule = one_f_one_b(2, 3);
    schedule.actions[extra.stage >= 0 ? extra.stage % 2 : 0].push_back(extra);
    return error_of<ScheduleError>([&] { validate(schedule); });
  };
  for (const int mb : {0, 2}) {  // in range: a duplicate, not a range problem
    const auto message = with_extra({1, ActionKind::kForward, mb});
    EXPECT_NE(message.find("a duplicate of"), std::string::npos) << mb << ": " << message;
    EXPECT_EQ(message.find("out of range"), std::string::npos) << mb << ": " << message;
  }
  for (const int mb : {3, 4, -1}) {
    const auto message = with_extra({1, ActionKind::kForward, mb});
    EXPECT_NE(message.find(fmt::format("microbatch {} is out of range [0, 3)", mb)), std::string::npos)
        << mb << ": " << message;
  }
  for (const int stage : {0, 1}) {
    const auto message = with_extra({stage, ActionKind::kBackward, 2});
    EXPECT_NE(message.find("a duplicate of"), std::string::npos) << stage << ": " << message;
    EXPECT_EQ(message.find("out of range"), std::string::npos) << stage << ": " << message;
  }
  for (const int stage : {2, 3, -1}) {
    const auto message = with_extra({stage, ActionKind::kBackward, 0});
    EXPECT_NE(message.find(fmt::format("stage {} is out of range [0, 2)", stage)), std::string::npos)
        << stage << ": " << message;
  }
}

TEST(PipelineValidate, ListsAtMostTwentyProblems) {
  Schedule empty(ScheduleShape(2, 30));  // 120 actions missing
  const auto message = error_of<ScheduleError>([&] { validate(empty); });
  EXPECT_NE(message.find("... and 100 more"), std::string::npos) << message;
}

TEST(PipelineFormat, GridHasOneColumnPerRankAndMarksCells) {
  const auto schedule = one_f_one_b(2, 2);
  EXPECT_EQ(format_schedule_grid(schedule),
            "         rank 0  rank 1\n"
            "step 0:  0F0     1F0\n"
            "step 1:  0F1     1B0\n"
            "step 2:  0B0     1F1\n"
            "step 3:  0B1     1B1\n");
  // A mark past the last action points at the end.
  EXPECT_EQ(format_schedule_grid(schedule, {{0, 2}, {1, 9}}),
            "         rank 0   rank 1\n"
            "step 0:  0F0      1F0\n"
            "step 1:  0F1      1B0\n"
            "step 2:  >>0B0<<  1F1\n"
            "step 3:  0B1      1B1\n"
            "step 4:           >>end<<\n");
}

TEST(PipelineFormat, RankScheduleMarksTheFailingAction) {
  const auto schedule = one_f_one_b(2, 8);
  EXPECT_EQ(format_rank_schedule(schedule, 1, 3),
            "rank 1 of 2 (stages 1), 16 actions:\n"
            "  [ 0] 1F0 1B0 1F1 >>1B1<< 1F2 1B2 1F3 1B3 1F4 1B4 1F5 1B5\n"
            "  [12] 1F6 1B6 1F7 1B7\n");
  EXPECT_EQ(format_rank_schedule(one_f_one_b(1, 1), 0, 7),
            "rank 0 of 1 (stages 0), 2 actions:\n  [0] 0F0 0B0 >>end<<\n");
  EXPECT_EQ(format_rank_schedule(interleaved_schedule(ScheduleShape(2, 2).chunks(2)), 0),
            "rank 0 of 2 (stages 0, 2), 8 actions:\n  [0] 0F0 0F1 2F0 2F1 2B0 2B1 0B0 0B1\n");
  EXPECT_THROW(format_rank_schedule(schedule, 2), std::invalid_argument);
}

}  // namespace
}  // namespace colo::pipeline

namespace colo::pipeline {
namespace {

// Evaluation runs forwards only, for any number of microbatches (a last batch that is short).
TEST(PipelineForwardOnly, ValidatesAndRunsWithoutDeadlockForEveryShape) {
  for (int pp : {1, 2, 3, 4, 8}) {
    for (int chunks : {1, 2, 3}) {
      if (chunks > 1 && pp < 2) continue;
      for (int m : {1, 2, 3, pp, 2 * pp + 1}) {
        SCOPED_TRACE(::testing::Message() << "pp " << pp << " chunks " << chunks << " m " << m);
        const auto schedule = forward_only_schedule(ScheduleShape(pp, m).chunks(chunks));
        EXPECT_TRUE(schedule.forward_only);
        EXPECT_NO_THROW(validate(schedule));
        const auto result = simulate(schedule);
        for (const auto& rank : result.ranks) EXPECT_EQ(rank.peak_in_flight, 0) << "nothing is held for backward";
      }
    }
  }
}

TEST(PipelineForwardOnly, ABackwardInAForwardOnlyScheduleIsAnError) {
  auto schedule = forward_only_schedule(ScheduleShape(2, 2));
  schedule.actions[1].push_back(Action::parse("1B0"));
  try {
    validate(schedule);
    FAIL() << "no error";
  } catch (const ScheduleError& e) {
    EXPECT_NE(std::string(e.what()).find("a B action in a forward-only schedule"), std::string::npos) << e.what();
  }
  EXPECT_THROW(forward_only_schedule(ScheduleShape(1, 2).chunks(2)), std::invalid_argument);
}

}  // namespace
}  // namespace colo::pipeline
