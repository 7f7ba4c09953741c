// core/pipeline's lowering and dry run: every generated schedule, over many shapes, lowers to
// programs that the rendezvous simulator runs without deadlock and with every message matched by
// the right receive, with the bubble of its closed form; and deliberately broken schedules and
// programs are caught, each with an error that says what is wrong.
#include <colo/pipeline/program.h>
#include <colo/pipeline/schedule_generators.h>
#include <colo/pipeline/schedule_registry.h>
#include <colo/pipeline/simulator.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "error_of.h"

namespace colo::pipeline {
namespace {

using colo::testing::error_of;

double idle_per_rank(const SimulationResult& result, int rank) { return result.makespan - result.ranks[rank].busy; }

constexpr double kTolerance = 1e-9;

// The shapes every test sweeps: pp in {1, 2, 3, 4, 8}, m from below pp to 4 pp.
std::vector<int> microbatch_counts(int pp) {
  std::vector<int> counts = {1, pp, 2 * pp, 4 * pp};
  if (pp > 2) counts.push_back(pp - 1);
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  return counts;
}

// Closed forms, with the default costs (F = 1, full B = 2; split: B = 1, W = 1; a chunk's action
// costs 1 / chunks of that) and free communication:
//   GPipe and 1F1B: every rank idles (pp - 1) (F + B) = 3 (pp - 1) of a makespan of
//     3 (m + pp - 1), so the bubble is (pp - 1) / (m + pp - 1), for any m.
TEST(PipelineSimulator, GPipeAndOneFOneBHaveTheClassicBubble) {
  for (int pp : {1, 2, 3, 4, 8}) {
    for (int m : microbatch_counts(pp)) {
      const double expected = static_cast<double>(pp - 1) / (m + pp - 1);
      for (const std::string style : {"gpipe", "1f1b"}) {
        SCOPED_TRACE(style + " pp=" + std::to_string(pp) + " m=" + std::to_string(m));
        const auto result = simulate(builtin_schedules().make(style, ScheduleShape(pp, m)));
        EXPECT_NEAR(result.bubble_fraction(), expected, kTolerance);
        EXPECT_NEAR(result.makespan, 3.0 * (m + pp - 1), kTolerance);
        for (int r = 0; r < pp; ++r) EXPECT_NEAR(result.ranks[r].busy, 3.0 * m, kTolerance);
      }
    }
  }
}

// Activations held (forwarded, B not run): GPipe holds every microbatch (but with pp = 1 it
// runs F0 B0 F1 B1 ...); 1F1B holds min(pp - r, m) on rank r, pp at most, on rank 0.
TEST(PipelineSimulator, PeakActivationsOfGPipeAndOneFOneB) {
  for (int pp : {1, 2, 3, 4, 8}) {
    for (int m : microbatch_counts(pp)) {
      SCOPED_TRACE("pp=" + std::to_string(pp) + " m=" + std::to_string(m));
      const auto gpipe = simulate(gpipe_schedule(ScheduleShape(pp, m)));
      const auto one_f_one_b = simulate(one_f_one_b_schedule(ScheduleShape(pp, m)));
      for (int r = 0; r < pp; ++r) {
        EXPECT_EQ(gpipe.ranks[r].peak_in_flight, pp == 1 ? 1 : m);
        EXPECT_EQ(one_f_one_b.ranks[r].peak_in_flight, std::min(pp - r, m));
        EXPECT_EQ(one_f_one_b.ranks[r].peak_unfinished, one_f_one_b.ranks[r].peak_in_flight);
      }
      EXPECT_EQ(one_f_one_b.ranks[0].peak_in_flight, std::min(pp, m));
    }
  }
}

// Interleaved, v chunks of the same model: the bubble shrinks by v. Each rank idles
// (pp - 1) (F + B) / v = 3 (pp - 1) / v of a makespan of 3 m + 3 (pp - 1) / v, so the bubble is
// exactly (pp - 1) / (v m + pp - 1), m = pp included. Activations: rank r holds at most
// v pp - r chunks' worth (its warm-up plus one); each chunk's is 1 / v of a rank's share, so rank
// 0 holds pp stages' worth, as in 1F1B.
TEST(PipelineSimulator, InterleavedBubbleShrinksByTheChunkCount) {
  for (int pp : {2, 3, 4, 8}) {
    for (int m : {pp, 2 * pp, 4 * pp}) {
      for (int v : {2, 3, 4}) {
        SCOPED_TRACE("pp=" + std::to_string(pp) + " m=" + std::to_string(m) + " chunks=" + std::to_string(v));
        const auto schedule = interleaved_schedule(ScheduleShape(pp, m).chunks(v));
        const auto result = simulate(schedule);
        EXPECT_NEAR(result.bubble_fraction(), static_cast<double>(pp - 1) / (v * m + pp - 1), kTolerance);
        EXPECT_NEAR(result.makespan, 3.0 * m + 3.0 * (pp - 1) / v, kTolerance);
        for (int r = 0; r < pp; ++r) EXPECT_EQ(result.ranks[r].peak_in_flight, v * pp - r);
      }
    }
  }
}

// The interleaved schedule with Megatron's warm-up, (pp - r - 1) * 2 + (v - 1) * pp forwards,
// built for Megatron's lowering (a forward's output leaves after the next backward).
Schedule megatron_interleaved(int pp, int m, int v) {
  Schedule schedule(ScheduleShape(pp, m).chunks(v));
  const int total = v * m;
  for (int r = 0; r < pp; ++r) {
    const auto order = [&](int k, bool forward) {
      const int chunk = (k % (pp * v)) / pp;
      return Action{(forward ? chunk : v - 1 - chunk) * pp + r, forward ? ActionKind::kForward : ActionKind::kBackward,
                    k / (pp * v) * pp + k % pp};
    };
    const int warmup = std::min((pp - r - 1) * 2 + (v - 1) * pp, total);
    for (int k = 0; k < warmup; ++k) schedule.actions[r].push_back(order(k, true));
    for (int k = 0; k + warmup < total; ++k) {
      schedule.actions[r].push_back(order(k + warmup, true));
      schedule.actions[r].push_back(order(k, false));
    }
    for (int k = total - warmup; k < total; ++k) schedule.actions[r].push_back(order(k, false));
  }
  return schedule;
}

// Lowered by lower(), some of the Megatron warm-up's messages have no moment when sender and
// receiver are both free, and the stalls add up; it also holds pp - 1 more chunks on rank 0.
TEST(PipelineSimulator, MegatronsInterleavedWarmUpStallsUnderRendezvous) {
  const int pp = 2;
  const int m = 8;
  const int v = 2;
  const double closed_form = static_cast<double>(pp - 1) / (v * m + pp - 1);  // 1/17
  const auto megatron = simulate(megatron_interleaved(pp, m, v));
  const auto colo = simulate(interleaved_schedule(ScheduleShape(pp, m).chunks(v)));
  EXPECT_NEAR(colo.bubble_fraction(), closed_form, kTolerance);
  EXPECT_GT(megatron.bubble_fraction(), 2 * closed_form);
  EXPECT_EQ(megatron.ranks[0].peak_in_flight, colo.ranks[0].peak_in_flight + pp - 1);
}

// ZB-H1 with F = B = W = 1: the backward's critical path to rank 0 is B alone, and the W's fill
// the cool-down, so for m >= pp each rank idles pp - 1 (the paper's (p - 1)(T_F + T_B - T_W)):
// exactly a third of 1F1B's 3 (pp - 1) with the same total work (1F1B's B = B + W = 2); the
// bubble is (pp - 1) / (3 m + pp - 1) against 1F1B's (pp - 1) / (m + pp - 1). Measured for
// m < pp: each rank idles 2 pp - m - 1. Activations held (F run, B not) are 1F1B's; counting the
// microbatches that await their W as well, no rank holds more than pp microbatches' state, as
// 1F1B's rank 0 does.
TEST(PipelineSimulator, ZeroBubbleIdlesAThirdOfOneFOneB) {
  for (int pp : {1, 2, 3, 4, 8}) {
    for (int m : microbatch_counts(pp)) {
      SCOPED_TRACE("pp=" + std::to_string(pp) + " m=" + std::to_string(m));
      const auto zero_bubble = simulate(zero_bubble_h1_schedule(ScheduleShape(pp, m)));
      const auto one_f_one_b = simulate(one_f_one_b_schedule(ScheduleShape(pp, m)));
      const double idle = m >= pp ? pp - 1 : 2 * pp - m - 1;
      for (int r = 0; r < pp; ++r) {
        EXPECT_NEAR(zero_bubble.ranks[r].busy, 3.0 * m, kTolerance);
        EXPECT_NEAR(idle_per_rank(zero_bubble, r), idle, kTolerance);
        EXPECT_EQ(zero_bubble.ranks[r].peak_in_flight, one_f_one_b.ranks[r].peak_in_flight);
        EXPECT_EQ(zero_bubble.ranks[r].peak_unfinished, std::min(pp, m));
      }
      if (pp == 1) {
        EXPECT_NEAR(zero_bubble.bubble_fraction(), 0.0, kTolerance);
        continue;
      }
      EXPECT_LT(zero_bubble.bubble_fraction(), one_f_one_b.bubble_fraction());
      if (m >= pp) {
        EXPECT_NEAR(3 * idle_per_rank(zero_bubble, 0), idle_per_rank(one_f_one_b, 0), kTolerance);
        EXPECT_NEAR(zero_bubble.bubble_fraction(), static_cast<double>(pp - 1) / (3 * m + pp - 1), kTolerance);
      }
    }
  }
}

// The report's table: pp = 4, m = 8.
TEST(PipelineSimulator, BubbleTableForFourStagesAndEightMicrobatches) {
  const ScheduleShape shape(4, 8);
  EXPECT_NEAR(simulate(gpipe_schedule(shape)).bubble_fraction(), 3.0 / 11, kTolerance);
  EXPECT_NEAR(simulate(one_f_one_b_schedule(shape)).bubble_fraction(), 3.0 / 11, kTolerance);
  EXPECT_NEAR(simulate(interleaved_schedule(ScheduleShape(shape).chunks(2))).bubble_fraction(), 3.0 / 19, kTolerance);
  EXPECT_NEAR(simulate(zero_bubble_h1_schedule(shape)).bubble_fraction(), 3.0 / 27, kTolerance);
}

// When each action starts if sends are buffered (each action runs as soon as its rank is free
// and its inputs exist): written independently of lower(), as the reference it must meet.
std::vector<std::vector<double>> buffered_starts(const Schedule& schedule, const ActionCosts& costs) {
  const int stages = schedule.num_stages();
  std::map<std::tuple<int, int, int>, double> done;  // (stage, kind, microbatch) -> end
  std::vector<std::vector<double>> starts(schedule.actions.size());
  std::vector<double> free(schedule.actions.size(), 0.0);
  for (bool progress = true; progress;) {
    progress = false;
    for (std::size_t r = 0; r < schedule.actions.size(); ++r) {
      while (starts[r].size() < schedule.actions[r].size()) {
        const Action& a = schedule.actions[r][starts[r].size()];
        double start = free[r];
        bool ready = true;
        for (const auto& input : inputs_of(a, stages)) {
          const auto it = done.find({input.from_stage, static_cast<int>(input.kind), input.microbatch});
          if (it == done.end()) {
            ready = false;
            break;
          }
          start = std::max(start, it->second);
        }
        if (!ready) break;
        starts[r].push_back(start);
        free[r] = start + cost_of(a, costs, schedule.split_backward, schedule.shape.chunks());
        done[{a.stage, static_cast<int>(a.kind), a.microbatch}] = free[r];
        progress = true;
      }
    }
  }
  return starts;
}

// lower() puts every message where sender and receiver are both free at the same moment, so with
// the costs it places by, the rendezvous run never stalls: every action starts exactly when it
// would with buffered sends.
TEST(PipelineLower, ProgramsRunAsIfSendsWereBuffered) {
  for (int pp : {2, 3, 4, 8}) {
    for (int m : microbatch_counts(pp)) {
      std::vector<Schedule> schedules = {gpipe_schedule(ScheduleShape(pp, m)),
                                         one_f_one_b_schedule(ScheduleShape(pp, m)),
                                         zero_bubble_h1_schedule(ScheduleShape(pp, m))};
      if (m % pp == 0) {
        for (int v : {2, 3, 4}) schedules.push_back(interleaved_schedule(ScheduleShape(pp, m).chunks(v)));
      }
      for (const auto& schedule : schedules) {
        const auto result = simulate(schedule);
        const auto reference = buffered_starts(schedule, ActionCosts());
        for (int r = 0; r < pp; ++r) {
          ASSERT_EQ(reference[r].size(), schedule.actions[r].size());
          for (std::size_t i = 0; i < reference[r].size(); ++i) {
            ASSERT_NEAR(result.ranks[r].actions[i].start, reference[r][i], kTolerance)
                << "pp=" << pp << " m=" << m << " chunks=" << schedule.shape.chunks() << " rank " << r << " action "
                << schedule.actions[r][i].str();
          }
        }
      }
    }
  }
  // Megatron's interleaved warm-up has messages without such a moment, and stalls.
  const auto megatron = megatron_interleaved(2, 8, 2);
  const auto reference = buffered_starts(megatron, ActionCosts());
  const auto result = simulate(megatron);
  double delay = 0;
  for (std::size_t i = 0; i < reference[0].size(); ++i) delay += result.ranks[0].actions[i].start - reference[0][i];
  EXPECT_GT(delay, 1.0);
}

// Deadlock freedom and message matching do not depend on timing: programs lowered with the
// reference costs also run when the actions take other times.
TEST(PipelineSimulator, ProgramsRunUnderOtherCostsThanTheyWereLoweredFor) {
  const ActionCosts skewed = ActionCosts().forward(1.0).backward(3.5).input_grad(2.0).weight_grad(0.25);
  for (int pp : {2, 3, 4, 8}) {
    for (int m : {pp, 4 * pp}) {
      std::vector<Schedule> schedules = {gpipe_schedule(ScheduleShape(pp, m)),
                                         one_f_one_b_schedule(ScheduleShape(pp, m)),
                                         zero_bubble_h1_schedule(ScheduleShape(pp, m))};
      for (int v : {2, 3}) schedules.push_back(interleaved_schedule(ScheduleShape(pp, m).chunks(v)));
      for (const auto& schedule : schedules) {
        const auto result = simulate(schedule, skewed);
        double busy = 0;
        for (const auto& action : schedule.actions[0])
          busy += cost_of(action, skewed, schedule.split_backward, schedule.shape.chunks());
        EXPECT_NEAR(result.ranks[0].busy, busy, kTolerance);
      }
    }
  }
}

TEST(PipelineSimulator, RecordsWhenEachStepStartsAndEnds) {
  // 1F1B, pp = 2, m = 2: rank 1 runs F0 [1, 2], B0 [2, 4], F1 [4, 5], B1 [5, 7]; rank 0 runs
  // F0 [0, 1], F1 [1, 2], then waits for the gradients: B0 [4, 6], B1 [7, 9].
  const auto result = simulate(one_f_one_b_schedule(ScheduleShape(2, 2)));
  const auto expect_times = [&](int rank, const std::vector<std::pair<double, double>>& times) {
    ASSERT_EQ(result.ranks[rank].actions.size(), times.size());
    for (std::size_t i = 0; i < times.size(); ++i) {
      EXPECT_DOUBLE_EQ(result.ranks[rank].actions[i].start, times[i].first) << "rank " << rank << " action " << i;
      EXPECT_DOUBLE_EQ(result.ranks[rank].actions[i].end, times[i].second) << "rank " << rank << " action " << i;
    }
  };
  expect_times(0, {{0, 1}, {1, 2}, {4, 6}, {7, 9}});
  expect_times(1, {{1, 2}, {2, 4}, {4, 5}, {5, 7}});
  EXPECT_DOUBLE_EQ(result.makespan, 9);
  EXPECT_DOUBLE_EQ(result.ranks[1].finish, 7);
  // Rank 0's batch before B0 (send act mb1, receive grad mb0) is posted at 2 and completes at 4.
  const auto& program = result.ranks[0].program;
  ASSERT_FALSE(program.steps[3].is_compute());
  EXPECT_EQ(program.steps[3].str(), "{send act 0->1 mb1 to 1, recv grad 1->0 mb0 from 1}");
  EXPECT_DOUBLE_EQ(result.ranks[0].steps[3].start, 2);
  EXPECT_DOUBLE_EQ(result.ranks[0].steps[3].end, 4);
  EXPECT_DOUBLE_EQ(result.bubble_fraction(), 1.0 - 12.0 / 18.0);

  EXPECT_EQ(format_timeline(result),
            "rank 0: 0F0 0F1 .   .   0B0 0B0 .   0B1 0B1\n"
            "rank 1: .   1F0 1B0 1B0 1F1 1B1 1B1 .   .\n");
  EXPECT_THROW(simulate(one_f_one_b_schedule(ScheduleShape(2, 2)), ActionCosts().forward(0)), std::invalid_argument);
}

// A stage that costs more sets the pace: 1F1B, pp = 2, m = 2 with stage 1 twice as slow as stage 0
// (a performance model's per-stage costs). Rank 0: F0 [0, 1], F1 [1, 2], B0 waits for rank 1's
// B0 [3, 7], runs [7, 9]; rank 1: F0 [1, 3], B0 [3, 7], F1 [7, 9], B1 [9, 13]; rank 0's B1 [13, 15].
TEST(PipelineSimulator, PerStageCostsGiveEachStageItsOwnTimes) {
  const auto schedule = one_f_one_b_schedule(ScheduleShape(2, 2));
  const auto costs = ActionCosts().per_stage({StageCosts{1, 2, 1, 1}, StageCosts{2, 4, 2, 2}});
  const auto result = simulate(schedule, costs);
  EXPECT_DOUBLE_EQ(result.makespan, 15);
  EXPECT_DOUBLE_EQ(result.ranks[0].busy, 6);
  EXPECT_DOUBLE_EQ(result.ranks[1].busy, 12);
  EXPECT_DOUBLE_EQ(result.ranks[1].actions[2].start, 7);  // F1 on rank 1
  // Interleaved: the stage's own cost, not divided by the chunks.
  const auto interleaved = interleaved_schedule(ScheduleShape(2, 2).chunks(2));
  const auto even = simulate(interleaved, ActionCosts().per_stage(std::vector<StageCosts>(4, StageCosts{0.5, 1, 0.5, 0.5})));
  EXPECT_DOUBLE_EQ(even.makespan, simulate(interleaved).makespan);
  // Of the wrong count, or not positive: an error that says which.
  EXPECT_THROW(simulate(schedule, ActionCosts().per_stage({StageCosts{}})), std::invalid_argument);
  try {
    simulate(schedule, ActionCosts().per_stage({StageCosts{}, StageCosts{1, 0, 1, 1}}));
    ADD_FAILURE() << "a zero backward cost was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("per_stage[1].backward"), std::string::npos) << e.what();
  }
}

// Megatron's pattern, written out: after each action, one batch that sends its output and
// receives the next action's input (the batch before the first action only receives).
std::vector<RankProgram> send_with_next_receive(const Schedule& schedule) {
  const int stages = schedule.num_stages();
  std::vector<RankProgram> programs(schedule.actions.size());
  for (std::size_t rank = 0; rank < programs.size(); ++rank) {
    programs[rank].rank = static_cast<int>(rank);
    const auto& actions = schedule.actions[rank];
    std::vector<CommOp> pending;
    for (std::size_t i = 0; i <= actions.size(); ++i) {
      if (i < actions.size()) {
        for (const auto& m : inputs_of(actions[i], stages))
          pending.push_back({CommKind::kRecv, schedule.rank_of(m.from_stage), m});
      }
      if (!pending.empty()) programs[rank].steps.push_back({CommBatch{pending}, i});
      pending.clear();
      if (i == actions.size()) break;
      programs[rank].steps.push_back({actions[i], i});
      for (const auto& m : outputs_of(actions[i], stages))
        pending.push_back({CommKind::kSend, schedule.rank_of(m.to_stage), m});
    }
  }
  return programs;
}

std::vector<std::string> program_texts(const std::vector<RankProgram>& programs) {
  std::vector<std::string> out;
  for (const auto& program : programs) out.push_back(program.str());
  return out;
}

TEST(PipelineLower, OneFOneBGetsMegatronsBatches) {
  for (int pp : {2, 3, 4, 8}) {
    for (int m : microbatch_counts(pp)) {
      const auto schedule = one_f_one_b_schedule(ScheduleShape(pp, m));
      EXPECT_EQ(program_texts(lower(schedule)), program_texts(send_with_next_receive(schedule)))
          << "pp=" << pp << " m=" << m;
    }
  }
}

TEST(PipelineLower, GPipeProgramsForTwoRanks) {
  const auto programs = lower(gpipe_schedule(ScheduleShape(2, 2)));
  ASSERT_EQ(programs.size(), 2u);
  EXPECT_EQ(programs[0].str(),
            "rank 0 program, 7 steps:\n"
            "    0  0F0\n"
            "    1  {send act 0->1 mb0 to 1}\n"
            "    2  0F1\n"
            "    3  {send act 0->1 mb1 to 1, recv grad 1->0 mb0 from 1}\n"
            "    4  0B0\n"
            "    5  {recv grad 1->0 mb1 from 1}\n"
            "    6  0B1\n");
  EXPECT_EQ(programs[1].str(),
            "rank 1 program, 8 steps:\n"
            "    0  {recv act 0->1 mb0 from 0}\n"
            "    1  1F0\n"
            "    2  {recv act 0->1 mb1 from 0}\n"
            "    3  1F1\n"
            "    4  1B0\n"
            "    5  {send grad 1->0 mb0 to 0}\n"
            "    6  1B1\n"
            "    7  {send grad 1->0 mb1 to 0}\n");
  // Each step knows the action it belongs to (a batch: the action that runs next).
  EXPECT_EQ(programs[0].steps[3].action_index, 2u);
  EXPECT_EQ(programs[1].steps[7].action_index, 4u);
  EXPECT_EQ(programs[1].steps[4].action().str(), "1B0");
}

TEST(PipelineLower, OneRankCommunicatesNothing) {
  for (const auto& schedule : {one_f_one_b_schedule(ScheduleShape(1, 4)), zero_bubble_h1_schedule(ScheduleShape(1, 4)),
                               gpipe_schedule(ScheduleShape(1, 4))}) {
    const auto programs = lower(schedule);
    ASSERT_EQ(programs.size(), 1u);
    ASSERT_EQ(programs[0].steps.size(), schedule.actions[0].size());
    for (const auto& step : programs[0].steps) EXPECT_TRUE(step.is_compute());
  }
}

// Megatron's pattern is not enough for interleaved schedules under rendezvous. With colo's order,
// rank 0 would send a gradient (after 2B0) before an activation (after 0F2) that rank 1 receives
// first: the messages would be swapped. With Megatron's warm-up, rank 0's next forward (of stage
// 0) receives nothing, so a gradient's send goes alone while rank 1 is sending to rank 0 before
// receiving it: deadlock. lower() places both correctly.
TEST(PipelineLower, SendingRightAfterEachActionFailsInterleavedSchedules) {
  const auto colo = interleaved_schedule(ScheduleShape(2, 4).chunks(2));
  auto message = error_of<ScheduleError>([&] { simulate(colo, send_with_next_receive(colo)); });
  EXPECT_NE(message.find("rank 0's 5th send to rank 1 (step 9) carries grad 2->1 mb0, but rank 1's 5th receive from "
                         "rank 0 (step 10) expects act 0->1 mb2"),
            std::string::npos)
      << message;
  EXPECT_NO_THROW(simulate(colo));

  const auto megatron = megatron_interleaved(2, 4, 2);
  message = error_of<ScheduleError>([&] { simulate(megatron, send_with_next_receive(megatron)); });
  EXPECT_NE(message.find("pipeline deadlock (pp=2, microbatches=4, chunks=2)"), std::string::npos) << message;
  EXPECT_NE(message.find("rank 0 is blocked at step 11 {send grad 2->1 mb0 to 1}, before action 6 (0F3)"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("send grad 2->1 mb0 to 1: waits for rank 1 to post its 6th receive from rank 0 (its step 12), "
                         "but it is at step 10"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("rank 1 is blocked at step 10"), std::string::npos) << message;
  EXPECT_NE(message.find("step 6:   >>0F3<<  >>1F2<<"), std::string::npos) << message;  // the grid, marked
  EXPECT_NO_THROW(simulate(megatron));
}

// Broken schedules and programs.

TEST(PipelineSimulator, CatchesASwappedPairThatDeadlocks) {
  // GPipe with pp = 2, m = 2, but rank 0 runs B0 before F1: it waits for rank 1's gradient, and
  // rank 1 runs B0 only after F1, which needs rank 0's F1.
  auto schedule = gpipe_schedule(ScheduleShape(2, 2));
  std::swap(schedule.actions[0][1], schedule.actions[0][2]);
  ASSERT_NO_THROW(validate(schedule));  // each rank's order is fine on its own
  const auto message = error_of<ScheduleError>([&] { simulate(schedule); });
  EXPECT_NE(message.find("pipeline deadlock"), std::string::npos) << message;
  EXPECT_NE(message.find("rank 0 is blocked at step 1 {send act 0->1 mb0 to 1, recv grad 1->0 mb0 from 1}, before "
                         "action 1 (0B0):\n      recv grad 1->0 mb0 from 1: waits for rank 1 to post its 1st send to "
                         "rank 0 (its step 5), but it is at step 2"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("rank 1 is blocked at step 2 {recv act 0->1 mb1 from 0}, before action 1 (1F1)"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("step 1:  >>0B0<<  >>1F1<<"), std::string::npos) << message;
  // The unbroken schedule runs.
  EXPECT_NO_THROW(simulate(gpipe_schedule(ScheduleShape(2, 2))));
}

TEST(PipelineSimulator, CatchesAMissingBackward) {
  auto schedule = one_f_one_b_schedule(ScheduleShape(2, 3));
  schedule.actions[0].pop_back();
  const auto message = error_of<ScheduleError>([&] { simulate(schedule); });
  EXPECT_NE(message.find("0B2 is missing"), std::string::npos) << message;
}

TEST(PipelineSimulator, CatchesAnActionOnTheWrongRank) {
  auto schedule = one_f_one_b_schedule(ScheduleShape(3, 3));
  const Action moved = schedule.actions[2].front();  // 2F0
  schedule.actions[2].erase(schedule.actions[2].begin());
  schedule.actions[1].insert(schedule.actions[1].begin() + 1, moved);
  const auto message = error_of<ScheduleError>([&] { simulate(schedule); });
  EXPECT_NE(message.find("rank 1 action 1 (2F0): stage 2 runs on rank 2 (stage % pp), not rank 1"), std::string::npos)
      << message;
}

// GPipe, pp = 2, m = 2, written by hand with both activations in one batch: correct while rank 0
// sends them in the order rank 1 receives them; `swap_sends` swaps the two sends.
std::vector<RankProgram> gpipe_with_one_activation_batch(bool swap_sends) {
  const auto step = [](const std::string& action, std::size_t index) { return Step{Action::parse(action), index}; };
  const auto batch = [](std::vector<CommOp> ops, std::size_t index) { return Step{CommBatch{std::move(ops)}, index}; };
  const Message act0{ActionKind::kForward, 0, 1, 0};
  const Message act1{ActionKind::kForward, 0, 1, 1};
  const Message grad0{ActionKind::kBackward, 1, 0, 0};
  const Message grad1{ActionKind::kBackward, 1, 0, 1};
  std::vector<RankProgram> programs(2);
  std::vector<CommOp> exchange = {{CommKind::kSend, 1, act0}, {CommKind::kSend, 1, act1}, {CommKind::kRecv, 1, grad0}};
  if (swap_sends) std::swap(exchange[0], exchange[1]);
  programs[0] = {0,
                 {step("0F0", 0), step("0F1", 1), batch(exchange, 2), step("0B0", 2),
                  batch({{CommKind::kRecv, 1, grad1}}, 3), step("0B1", 3)}};
  programs[1] = {1,
                 {batch({{CommKind::kRecv, 0, act0}, {CommKind::kRecv, 0, act1}}, 0), step("1F0", 0), step("1F1", 1),
                  step("1B0", 2), batch({{CommKind::kSend, 0, grad0}}, 3), step("1B1", 3),
                  batch({{CommKind::kSend, 0, grad1}}, 4)}};
  return programs;
}

TEST(PipelineSimulator, CatchesMessagesMatchedOutOfOrder) {
  const auto schedule = gpipe_schedule(ScheduleShape(2, 2));
  EXPECT_NO_THROW(simulate(schedule, gpipe_with_one_activation_batch(false)));
  const auto message = error_of<ScheduleError>([&] { simulate(schedule, gpipe_with_one_activation_batch(true)); });
  EXPECT_NE(message.find("rank 0's 1st send to rank 1 (step 2) carries act 0->1 mb1, but rank 1's 1st receive from "
                         "rank 0 (step 0) expects act 0->1 mb0"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("the receiver would take microbatch 1's data for microbatch 0's"), std::string::npos)
      << message;
  EXPECT_NE(message.find("NCCL ignores tags"), std::string::npos) << message;
}

TEST(PipelineSimulator, CatchesProgramsThatBreakTheDataFlow) {
  const auto schedule = gpipe_schedule(ScheduleShape(2, 2));
  // Rank 1 computes F0 before receiving its input, and never sends its last gradient.
  auto programs = gpipe_with_one_activation_batch(false);
  programs[1].steps.pop_back();
  std::swap(programs[1].steps[0], programs[1].steps[1]);
  programs[1].steps[1].action_index = 1;
  const auto message = error_of<ScheduleError>([&] { simulate(schedule, programs); });
  EXPECT_NE(message.find("rank 1 step 0 (1F0): needs act 0->1 mb0, which the rank has not received"), std::string::npos)
      << message;
  EXPECT_NE(message.find("rank 1: never sends grad 1->0 mb1, which it computes"), std::string::npos) << message;

  // A program that computes something else than the schedule.
  programs = gpipe_with_one_activation_batch(false);
  programs[0].steps[3] = Step{Action::parse("0B1"), 2};
  EXPECT_NE(error_of<ScheduleError>([&] {
              simulate(schedule, programs);
            }).find("rank 0 step 3 (0B1): the schedule's next action on rank 0 is 0B0"),
            std::string::npos);

  // A message sent to the wrong rank.
  programs = gpipe_with_one_activation_batch(false);
  std::get<CommBatch>(programs[0].steps[2].op).ops[0].peer = 0;
  EXPECT_NE(error_of<ScheduleError>([&] {
              simulate(schedule, programs);
            }).find("peer 0 is not one of the other ranks in [0, 2)"),
            std::string::npos);
}

}  // namespace
}  // namespace colo::pipeline
