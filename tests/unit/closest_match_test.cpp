// colo::edit_distance and colo::closest_match: the "did you mean" hints of the plugin registry,
// plugin options and train_vit's command line.
#include <colo/booster/closest_match.h>
#include <gtest/gtest.h>

namespace colo {
namespace {

TEST(EditDistance, CountsInsertionsDeletionsAndSubstitutions) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("torch_ddp", "torch_ddp"), 0u);
  EXPECT_EQ(edit_distance("bucket_cap", "bucket_cap_mb"), 3u);  // three insertions
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);            // two substitutions, one insertion
  EXPECT_EQ(edit_distance("epohcs", "epochs"), 2u);             // a transposition is two edits
  EXPECT_EQ(edit_distance("sitting", "kitten"), edit_distance("kitten", "sitting"));
}

TEST(ClosestMatch, SuggestsOnlyPlausibleTypos) {
  const std::vector<std::string> plugins = {"torch_ddp", "low_level_zero", "gemini", "hybrid_parallel"};
  EXPECT_EQ(closest_match("torch_dp", plugins), "torch_ddp");
  EXPECT_EQ(closest_match("low_levle_zero", plugins), "low_level_zero");
  EXPECT_EQ(closest_match("gemini", plugins), "gemini");
  // Within a third of the word's length, at least 1: "zero" is 10 edits from low_level_zero.
  EXPECT_EQ(closest_match("zero", plugins), std::nullopt);
  EXPECT_EQ(closest_match("ddp", plugins), std::nullopt);
  EXPECT_EQ(closest_match("anything", {}), std::nullopt);
}

}  // namespace
}  // namespace colo
