// Elastic data parallelism's pieces inside the ranks (colo/env/elastic.h, docs/failures.md): the
// accumulation that keeps a global batch on fewer data-parallel ranks, COLO_ELASTIC_MAX_WORLD and
// the notes a rank leaves colo-run. colo-run --elastic and train_vit under it are tested as
// programs (colo_run_restart_test.cpp, train_vit_restart_test.cpp); a loader resuming another
// shape's position in data_test.cpp.
#include <colo/engine/parallelize.h>
#include <colo/env/elastic.h>
#include <colo/files/files.h>
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>

namespace {

using colo::accumulation_keeping_global_batch;
using colo::env::ElasticNote;

colo::env::Lookup lookup_in(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    const auto found = vars.find(name);
    return found == vars.end() ? nullptr : found->second.c_str();
  };
}

TEST(ElasticBatch, FewerRanksAccumulateJustEnoughToKeepTheGlobalBatchWithoutLargerMicroBatches) {
  // Planned: 4 ranks x 1 pass of 6 (global 24).
  EXPECT_EQ(accumulation_keeping_global_batch(24, 4, 4, 1), 1);
  EXPECT_EQ(accumulation_keeping_global_batch(24, 3, 4, 1), 2);  // 3 x 2 passes of 4
  EXPECT_EQ(accumulation_keeping_global_batch(24, 2, 4, 1), 2);  // 2 x 2 of 6: exactly the planned parts
  EXPECT_EQ(accumulation_keeping_global_batch(24, 1, 4, 1), 4);
  // Global 12 over 3 ranks splits at 1 pass, but of 4 images where 3 were planned: 2 passes of 2.
  EXPECT_EQ(accumulation_keeping_global_batch(12, 3, 4, 1), 2);
  // The planned accumulation counts: 4 x 2 passes of 3 (24) on 2 ranks take 4 passes, not 3.
  EXPECT_EQ(accumulation_keeping_global_batch(24, 2, 4, 2), 4);
  // Ranks that do not divide the batch never split it; else the smallest a with enough parts
  // that splits it, not the first with enough parts.
  EXPECT_EQ(accumulation_keeping_global_batch(20, 3, 4, 1), std::nullopt);
  EXPECT_EQ(accumulation_keeping_global_batch(18, 4, 6, 1), std::nullopt);
  EXPECT_EQ(accumulation_keeping_global_batch(30, 2, 6, 1), 3);  // 6 parts of 5 (a = 4: 8 parts, no)
  EXPECT_EQ(accumulation_keeping_global_batch(32, 2, 6, 1), 4);  // a = 3 (6 parts) does not split 32
  // One image per rank per pass is the last resort.
  EXPECT_EQ(accumulation_keeping_global_batch(6, 2, 6, 1), 3);
  EXPECT_EQ(accumulation_keeping_global_batch(6, 4, 6, 1), std::nullopt);
  EXPECT_THROW(accumulation_keeping_global_batch(0, 2, 4, 1), std::invalid_argument);
  EXPECT_THROW(accumulation_keeping_global_batch(8, 2, 4, 0), std::invalid_argument);
}

TEST(ElasticEnvironment, MaxWorldIsReadAndCheckedLikeEveryVariable) {
  EXPECT_EQ(colo::env::elastic_max_world(lookup_in({})), std::nullopt);
  EXPECT_EQ(colo::env::elastic_max_world(lookup_in({{"COLO_ELASTIC_MAX_WORLD", "4"}})), 4);
  EXPECT_EQ(colo::env::elastic_max_world(lookup_in({{"COLO_ELASTIC_MAX_WORLD", "1"}})), 1);
  for (const char* bad : {"0", "-2", "4x", "99999999999"}) {
    EXPECT_THROW(colo::env::elastic_max_world(lookup_in({{"COLO_ELASTIC_MAX_WORLD", bad}})),
                 colo::env::VariableError)
        << bad;
  }
}

TEST(ElasticNotes, ARankLeavesOneLineColoRunReadsBackPerKindAndRank) {
  const std::string dir = colo::files::make_temp_directory("elastic_notes_");
  colo::env::leave_elastic_note(dir, ElasticNote::kCannotStart, 3, "GPU 3 failed\nthe probe");
  colo::env::leave_elastic_note(dir, ElasticNote::kWorldSizeUnusable, 1, "tp 2 does not divide 3");
  EXPECT_EQ(colo::env::read_elastic_note(dir, ElasticNote::kCannotStart, 3), "GPU 3 failed the probe");
  EXPECT_EQ(colo::env::read_elastic_note(dir, ElasticNote::kWorldSizeUnusable, 1), "tp 2 does not divide 3");
  EXPECT_EQ(colo::env::read_elastic_note(dir, ElasticNote::kCannotStart, 1), std::nullopt);
  EXPECT_EQ(colo::env::read_elastic_note(dir, ElasticNote::kWorldSizeUnusable, 3), std::nullopt);
  EXPECT_FALSE(colo::files::exists(colo::env::elastic_note_path(dir, ElasticNote::kCannotStart, 3) + ".partial"));
  // Outside colo-run (no report directory) a note is no-op, and nothing is read.
  colo::env::leave_elastic_note("", ElasticNote::kCannotStart, 0, "x");
  EXPECT_EQ(colo::env::read_elastic_note("", ElasticNote::kCannotStart, 0), std::nullopt);
  colo::files::remove_all(dir);
}

}  // namespace
