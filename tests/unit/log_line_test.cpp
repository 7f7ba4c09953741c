// colo::dist::Logger's lines: the rank in front in a world of several ranks, unless the launcher
// prefixes every line with it already (colo-run's COLO_RUN_PREFIXES_OUTPUT=1): one prefix, not two.
#include <colo/dist/logger.h>
#include <gtest/gtest.h>

namespace {

using colo::dist::log_line;

TEST(LogLine, TheRankGoesInFrontOnceWhoeverPutsItThere) {
  EXPECT_EQ(log_line(1, 2, "WARN", "a message", false), "[rank 1] WARN a message\n");
  EXPECT_EQ(log_line(1, 2, "WARN", "a message", true), "WARN a message\n");
  EXPECT_EQ(log_line(0, 1, "INFO", "alone", false), "INFO alone\n");
  EXPECT_EQ(log_line(0, 1, "INFO", "alone", true), "INFO alone\n");
}

}  // namespace
