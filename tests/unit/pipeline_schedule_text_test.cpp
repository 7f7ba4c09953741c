// Schedules as text (core/pipeline/schedule_text.h): a generated schedule written out reads back
// as itself, and every bad text is refused with the line it is on and what is wrong.
#include <colo/files/files.h>
#include <colo/pipeline/schedule_generators.h>
#include <colo/pipeline/schedule_registry.h>
#include <colo/pipeline/schedule_text.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "error_of.h"
#include "temporary_directory.h"

namespace colo::pipeline {
namespace {

using colo::testing::error_of;

// Equal schedules: shape, split backward, every rank's actions.
void expect_same_schedule(const Schedule& got, const Schedule& want) {
  EXPECT_EQ(describe(got.shape), describe(want.shape));
  EXPECT_EQ(got.split_backward, want.split_backward);
  EXPECT_EQ(got.forward_only, want.forward_only);
  ASSERT_EQ(got.actions.size(), want.actions.size());
  for (std::size_t r = 0; r < want.actions.size(); ++r) {
    EXPECT_EQ(format_actions(got.actions[r]), format_actions(want.actions[r])) << "rank " << r;
  }
}

// The message schedule_from_text() refuses `text` with, as "sched.txt".
std::string refusal(const std::string& text, int pp = 0, int microbatches = 0) {
  return error_of<std::invalid_argument>([&] { schedule_from_text(text, "sched.txt", pp, microbatches); });
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in:\n" << text;
}

TEST(PipelineScheduleText, OneFOneBWrittenOutReadsBackAsTheGeneratorsSchedule) {
  const auto want = one_f_one_b_schedule(ScheduleShape(2, 4));
  const auto text = schedule_to_text(want);
  EXPECT_EQ(text,
            "# pipeline schedule: pp=2, microbatches=4, chunks=1\n"
            "0F0,0F1,0B0,0F2,0B1,0F3,0B2,0B3\n"
            "1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3\n");
  expect_same_schedule(schedule_from_text(text, "1f1b.txt", 2, 4), want);
  expect_same_schedule(schedule_from_text(text, "1f1b.txt"), want);  // the shape from the text
}

TEST(PipelineScheduleText, EveryBuiltInRoundTripsWithItsChunksAndSplitBackward) {
  const auto& schedules = builtin_schedules();
  for (const auto& entry : schedules.entries()) {
    for (int pp : {1, 2, 3, 4}) {
      if (entry.supports_chunks && pp < 2) continue;
      const int chunks = entry.supports_chunks ? 2 : 1;
      const auto want = schedules.make(entry.name, ScheduleShape(pp, 2 * pp).chunks(chunks));
      SCOPED_TRACE(fmt::format("{} pp={}", entry.name, pp));
      const auto got = schedule_from_text(schedule_to_text(want), "t.txt");
      expect_same_schedule(got, want);
      EXPECT_EQ(got.shape.chunks(), chunks);
      EXPECT_EQ(got.split_backward, entry.splits_backward);
    }
  }
}

// torch's CSV as _dump_csv writes it (empty cells for idle steps), spaces, comments and blank lines.
TEST(PipelineScheduleText, ReadsCommentsBlankLinesSpacesAndEmptyCells) {
  const std::string text =
      "# hand-written\n"
      "\n"
      "0F0, 0F1 ,0B0,0F2,0B1,0F3,0B2,0B3   # rank 0\n"
      "   \r\n"
      "1F0,1B0,,1F1,1B1,1F2,1B2,1F3,1B3,\r\n";
  expect_same_schedule(schedule_from_text(text, "t.txt", 2, 4), one_f_one_b_schedule(ScheduleShape(2, 4)));
}

TEST(PipelineScheduleText, AnUnknownActionIsRefusedWithItsLine) {
  const auto message = refusal(
      "# pp 2\n"
      "0F0,0F1,0B0,0F2,0B1,0F3,0B2,0B3\n"
      "1F0,1B0,1F1,1X1,1F2,1B2,1F3,1B3\n",
      2, 4);
  expect_contains(message, "the pipeline schedule in sched.txt cannot run");
  expect_contains(message, "sched.txt:3: rank 1's line: action 3 of the list: '1X1' is not a pipeline action");
  expect_contains(message, "'X' is not a kind");
  // Every bad line at once.
  const auto two = refusal("0F0,oops\n1F0,1B0,1F1,\n1Q\n", 3, 2);
  expect_contains(two, "sched.txt:1: rank 0's line: action 1 of the list: 'oops'");
  expect_contains(two, "sched.txt:3: rank 2's line: action 0 of the list: '1Q'");
}

// pp=3 needs three rank lines: two (too few) and four (too many) are refused at the line where
// the count goes wrong; three is the shape that runs.
TEST(PipelineScheduleText, ARankCountOtherThanPpIsRefusedWithTheLine) {
  const std::vector<std::string> lines = {"0F0,0F1,0F2,0B0,0B1,0B2", "1F0,1F1,1B0,1F2,1B1,1B2",
                                          "2F0,2B0,2F1,2B1,2F2,2B2"};
  const auto text = [&](int count) {
    std::string out = "# one line per rank\n";
    for (int i = 0; i < count; ++i) out += lines[static_cast<std::size_t>(i % 3)] + "\n";
    return out;
  };
  expect_same_schedule(schedule_from_text(text(3), "t.txt", 3, 3), one_f_one_b_schedule(ScheduleShape(3, 3)));
  const auto few = refusal(text(2), 3, 3);
  expect_contains(few, "sched.txt:3: the text ends after 2 rank lines (this is rank 1's), but pp=3 needs one line per "
                       "pipeline rank, rank 0 first: ranks 2 to 2 have none");
  const auto many = refusal(text(4), 3, 3);
  expect_contains(many, "sched.txt:5: a line for rank 3, but pp=3 has ranks 0 to 2");
  expect_contains(refusal("# nothing\n\n", 2, 4), "sched.txt: no rank lines");
}

// With 4 microbatches per step, microbatch 3 is the last that exists: 4 and 5 are out of range,
// 3 where it does not belong is a duplicate.
TEST(PipelineScheduleText, AMicrobatchOutOfRangeIsRefusedWithItsLine) {
  const auto with_rank1 = [](const std::string& rank1) {
    return refusal("0F0,0F1,0B0,0F2,0B1,0F3,0B2,0B3\n" + rank1 + "\n", 2, 4);
  };
  for (int mb : {4, 5}) {
    const auto message = with_rank1(fmt::format("1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3,1F{}", mb));
    expect_contains(message, fmt::format("sched.txt:2: rank 1 action 8 (1F{}): microbatch {} is out of range [0, 4)",
                                         mb, mb));
  }
  const auto duplicate = with_rank1("1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3,1F3");
  expect_contains(duplicate, "sched.txt:2: rank 1 action 8 (1F3): a duplicate of rank 1 action 6");
  EXPECT_EQ(duplicate.find("out of range"), std::string::npos) << duplicate;
  // Fewer microbatches than the step runs: said once for the text, then each missing action
  // at the line of the rank that should run it.
  const auto fewer = refusal("0F0,0F1,0F2,0B0,0B1,0B2\n1F0,1B0,1F1,1B1,1F2,1B2\n", 2, 4);
  expect_contains(fewer, "sched.txt: the actions run microbatches 0 to 2 (3), but each step runs 4");
  expect_contains(fewer, "sched.txt:1: 0F3 is missing");
  expect_contains(fewer, "sched.txt:2: 1B3 is missing");
}

TEST(PipelineScheduleText, ValidateFindingsPointAtTheirLines) {
  // Rank 0's line holds a stage of rank 1's (1F1) and lacks its own microbatch 1.
  const auto message = refusal("# pp 2\n0F0,0B0,1F1\n\n1F0,1B0,1B1\n", 2, 2);
  expect_contains(message, "sched.txt:2: rank 0 action 2 (1F1): stage 1 runs on rank 1 (stage % pp), not rank 0");
  expect_contains(message, "sched.txt:2: 0F1 is missing");
  // A W makes the backward split, so every B needs its W.
  const auto split = refusal("0F0,0B0,0W0\n1F0,1B0\n", 2, 1);
  expect_contains(split, "sched.txt:2: 1W0 is missing (every stage and microbatch needs F, B and W)");
}

// Valid on every rank, but rank 0 waits for 1B0 before sending the activation of microbatch 1,
// which rank 1 needs before 1B0: a circle the simulator finds before any step runs.
TEST(PipelineScheduleText, ADeadlockingOrderIsRefusedWithTheLinesOfTheBlockedRanks) {
  const auto message = refusal(
      "# deadlocks\n"
      "0F0,0B0,0F1,0B1\n"
      "1F0,1F1,1B0,1B1\n",
      2, 2);
  expect_contains(message, "sched.txt:2: rank 0 never runs its action 1 (0B0)");
  expect_contains(message, "sched.txt:3: rank 1 never runs its action 1 (1F1)");
  expect_contains(message, "pipeline deadlock");
  // The same actions in 1F1B's order run.
  EXPECT_NO_THROW(schedule_from_text("0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n", "t.txt", 2, 2));
}

// A typo'd number would make a schedule far larger than its actions: refused at its line before
// anything is counted over that size.
TEST(PipelineScheduleText, ATypoedNumberIsRefusedWithItsLine) {
  const auto microbatch = refusal("0F0,0B0,0F1,0B1\n1F0,1B0,1F1,1B1,1F100000000\n");
  expect_contains(microbatch, "sched.txt:2: 1F100000000 makes this a schedule of 2 stages and 100000001 microbatches");
  expect_contains(microbatch, "is the microbatch a typo?");
  const auto stage = refusal("0F0,0B0,0F1,0B1,2000000000F0\n1F0,1B0,1F1,1B1\n");
  expect_contains(stage, "sched.txt:1: 2000000000F0 makes this a schedule of 2000000002 stages");
  expect_contains(stage, "is the stage a typo?");
}

TEST(PipelineScheduleText, AFileIsReadAndAMissingOneNamed) {
  colo::testing::TemporaryDirectory dir("colo_schedule_text");
  const auto path = files::join(dir.path(), "1f1b.txt");
  {
    std::ofstream out(path);
    out << schedule_to_text(one_f_one_b_schedule(ScheduleShape(2, 4)));
  }
  expect_same_schedule(load_schedule_file(path, 2, 4), one_f_one_b_schedule(ScheduleShape(2, 4)));
  const auto wrong = error_of<std::invalid_argument>([&] { load_schedule_file(path, 3, 4); });
  expect_contains(wrong, path + ":3: the text ends after 2 rank lines");
  const auto missing = files::join(dir.path(), "nothing.txt");
  expect_contains(error_of<std::invalid_argument>([&] { load_schedule_file(missing, 2, 4); }),
                  "the pipeline schedule file '" + missing + "' does not exist");
  expect_contains(error_of<std::invalid_argument>([&] { load_schedule_file(dir.path(), 2, 4); }),
                  "is not a regular file");
}

}  // namespace
}  // namespace colo::pipeline
