// The mesh's arithmetic with any number of named axes: shapes resolved and refused, coordinates
// and ranks, the slices over one axis and over a set of axes. No process groups here.
#include <colo/dist/mesh_layout.h>

#include "error_of.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace colo::dist {
namespace {

using colo::testing::error_of;

// dp=2 pp=1 tp=2 cp=2, cp innermost: rank = dp*4 + tp*2 + cp.
MeshShape four_axes(int dp = 2) { return {{"dp", dp}, {"pp", 1}, {"tp", 2}, {"cp", 2}}; }

void expect_contains(const std::string& text, const std::vector<std::string>& parts) {
  for (const auto& part : parts) EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
}

TEST(MeshLayout, AnyOneAxisOfSizeZeroTakesWhatTheWorldLeaves) {
  EXPECT_EQ(MeshLayout(four_axes(0), 8).size("dp"), 2);
  EXPECT_EQ(MeshLayout(four_axes(0), 4).size("dp"), 1);
  const MeshLayout inferred_inside({{"dp", 2}, {"pp", 0}, {"tp", 2}, {"cp", 1}}, 8);
  EXPECT_EQ(inferred_inside.size("pp"), 2);
  EXPECT_EQ(inferred_inside.describe(), "dp=2 pp=2 tp=2 cp=1");
  EXPECT_EQ(MeshLayout(four_axes(), 8).describe(), "dp=2 pp=1 tp=2 cp=2");
  const auto resolved = MeshLayout::resolve(four_axes(0), 16);
  ASSERT_EQ(resolved.size(), 4u);
  EXPECT_EQ(resolved[0].name, "dp");
  EXPECT_EQ(resolved[0].size, 4);
}

TEST(MeshLayout, SizesThatMultiplyToAnotherWorldSayWhichWouldFit) {
  // The product is 8: worlds 7 and 9 are refused, 8 fits.
  EXPECT_EQ(MeshLayout(four_axes(), 8).world_size(), 8);
  for (int world : {7, 9}) {
    expect_contains(error_of<std::invalid_argument>([&] { MeshLayout(four_axes(), world); }),
                    {"dp x pp x tp x cp = 2 x 1 x 2 x 2 = 8 ranks, but the job has " + std::to_string(world)});
  }
  const auto too_many = error_of<std::invalid_argument>([] { MeshLayout(four_axes(4), 8); });
  expect_contains(too_many, {"4 x 1 x 2 x 2 = 16 ranks, but the job has 8", "dp_size to 2", "tp_size to 1",
                             "cp_size to 1", "one size to 0"});
  EXPECT_EQ(too_many.find("pp_size"), std::string::npos) << "no pp size makes 16 ranks 8: " << too_many;
  expect_contains(error_of<std::invalid_argument>([] { MeshLayout({{"dp", 3}, {"tp", 3}}, 8); }),
                  {"dp x tp = 3 x 3 = 9 ranks", "choose sizes whose product is 8"});
}

TEST(MeshLayout, SizesThatDoNotDivideTheWorldNameTheAxesAndTheDivisors) {
  expect_contains(error_of<std::invalid_argument>([] { MeshLayout({{"dp", 0}, {"pp", 3}, {"tp", 1}, {"cp", 1}}, 8); }),
                  {"world size 8 is not divisible by pp_size x tp_size x cp_size = 3 x 1 x 1 = 3",
                   "product divides 8 (1, 2, 4, 8)", "dp takes what they leave"});
  expect_contains(error_of<std::invalid_argument>([] { MeshLayout({{"dp", 0}, {"cp", 3}}, 8); }),
                  {"not divisible by cp_size = 3"});
  // The boundary: cp x tp = 4 divides 8 and 12 but not 10.
  EXPECT_NO_THROW(MeshLayout(four_axes(0), 12));
  EXPECT_THROW(MeshLayout(four_axes(0), 10), std::invalid_argument);
}

TEST(MeshLayout, BadAxesAreNamed) {
  expect_contains(error_of<std::invalid_argument>([] { MeshLayout({{"dp", 0}, {"tp", 2}, {"cp", 0}}, 8); }),
                  {"mesh axes dp and cp both have size 0", "dp=0 tp=2 cp=0"});
  expect_contains(error_of<std::invalid_argument>([] { MeshLayout({{"dp", 0}, {"tp", 2}, {"cp", -1}}, 8); }),
                  {"mesh axis cp has size -1"});
  expect_contains(error_of<std::invalid_argument>([] { MeshLayout({{"dp", 0}, {"tp", 2}, {"tp", 2}}, 8); }),
                  {"mesh axis 'tp' appears twice in (dp, tp, tp)"});
  expect_contains(error_of<std::invalid_argument>([] { MeshLayout({{"dp", 0}, {"", 2}}, 8); }),
                  {"mesh axis 1 is named ''"});
  expect_contains(error_of<std::invalid_argument>([] { MeshLayout({{"dp", 0}, {"tp[0]", 2}}, 8); }),
                  {"mesh axis 1 is named 'tp[0]'"});
  EXPECT_THROW(MeshLayout({}, 1), std::invalid_argument);
  const MeshLayout layout(four_axes(), 8);
  expect_contains(error_of<std::invalid_argument>([&] { layout.size("ep"); }),
                  {"no axis 'ep'", "its axes are dp, pp, tp, cp"});
  expect_contains(error_of<std::invalid_argument>([&] { layout.ranks_over({"tp", "cp", "tp"}, 0); }),
                  {"mesh axis 'tp' appears twice in the set {tp,cp,tp}"});
  EXPECT_THROW(layout.ranks_over({}, 0), std::invalid_argument);
}

TEST(MeshLayout, StandardShapeKeepsOnlyDataParallelInferred) {
  const auto shape = dp_pp_tp_shape(0, 2, 2);
  ASSERT_EQ(shape.size(), 3u);
  EXPECT_EQ(shape[0].name, MeshAxis::kDp);
  EXPECT_EQ(shape[1].name, MeshAxis::kPp);
  EXPECT_EQ(shape[2].name, MeshAxis::kTp);
  EXPECT_EQ(MeshLayout(shape, 8).size(MeshAxis::kDp), 2);
  expect_contains(error_of<std::invalid_argument>([] { dp_pp_tp_shape(1, 0, 1); }),
                  {"dp may be 0", "dp=1 pp=0 tp=1"});
  EXPECT_THROW(dp_pp_tp_shape(1, 1, 0), std::invalid_argument);
  EXPECT_THROW(dp_pp_tp_shape(-1, 1, 1), std::invalid_argument);
}

// 2 x 2 x 2 as dp, pp, tp: rank = (dp * 2 + pp) * 2 + tp, written out.
TEST(MeshLayout, CoordinatesOfEveryRankOfTwoByTwoByTwo) {
  const MeshLayout layout(dp_pp_tp_shape(2, 2, 2), 8);
  const std::vector<MeshCoordinate> expected{{0, 0, 0}, {0, 0, 1}, {0, 1, 0}, {0, 1, 1},
                                             {1, 0, 0}, {1, 0, 1}, {1, 1, 0}, {1, 1, 1}};
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(layout.coordinate_of(r), expected[r]) << "rank " << r;
    EXPECT_EQ(layout.rank_of(expected[r]), r);
  }
  EXPECT_EQ(layout.coordinate_of(6, MeshAxis::kPp), 1);
  EXPECT_EQ(layout.coordinate_of(6, MeshAxis::kTp), 0);
  EXPECT_THROW(layout.coordinate_of(8), std::out_of_range);
  EXPECT_THROW(layout.coordinate_of(-1), std::out_of_range);
  EXPECT_THROW(layout.rank_of({0, 2, 0}), std::out_of_range);
  EXPECT_THROW(layout.rank_of({0, 0}), std::invalid_argument);
}

TEST(MeshLayout, CoordinatesOfEveryRankOfFourAxes) {
  const MeshLayout layout({{"dp", 2}, {"pp", 3}, {"tp", 2}, {"cp", 2}}, 24);
  // Counting with cp fastest and dp slowest visits the ranks in order.
  int r = 0;
  for (int dp = 0; dp < 2; ++dp) {
    for (int pp = 0; pp < 3; ++pp) {
      for (int tp = 0; tp < 2; ++tp) {
        for (int cp = 0; cp < 2; ++cp, ++r) {
          EXPECT_EQ(layout.coordinate_of(r), (MeshCoordinate{dp, pp, tp, cp})) << "rank " << r;
          EXPECT_EQ(layout.rank_of({dp, pp, tp, cp}), r);
        }
      }
    }
  }
  EXPECT_EQ(r, 24);
  // ((1 * 3 + 1) * 2 + 0) * 2 + 1 = 17.
  EXPECT_EQ(layout.coordinate_of(17), (MeshCoordinate{1, 1, 0, 1}));
  EXPECT_EQ(layout.coordinate_of(23), (MeshCoordinate{1, 2, 1, 1}));
  EXPECT_THROW(layout.coordinate_of(24), std::out_of_range);
}

TEST(MeshLayout, SlicesOverOneAxisAndOverSetsOfAxes) {
  const MeshLayout cube(dp_pp_tp_shape(2, 2, 2), 8);
  EXPECT_EQ(cube.axis_ranks(MeshAxis::kTp, 2), (std::vector<int>{2, 3}));
  EXPECT_EQ(cube.axis_ranks(MeshAxis::kPp, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(cube.axis_ranks(MeshAxis::kDp, 3), (std::vector<int>{3, 7}));
  EXPECT_EQ(cube.ranks_over({"dp", "tp"}, 0), (std::vector<int>{0, 1, 4, 5}));
  EXPECT_EQ(cube.ranks_over({"dp", "tp"}, 6), (std::vector<int>{2, 3, 6, 7}));
  EXPECT_EQ(cube.ranks_over({"tp", "dp"}, 6), (std::vector<int>{2, 3, 6, 7})) << "a set's order does not matter";
  EXPECT_EQ(cube.ranks_over({"pp", "tp"}, 5), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(cube.ranks_over({"dp", "pp", "tp"}, 3), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));

  const MeshLayout four(four_axes(), 8);  // rank = dp*4 + tp*2 + cp
  EXPECT_EQ(four.axis_ranks("cp", 5), (std::vector<int>{4, 5}));
  EXPECT_EQ(four.axis_ranks("pp", 5), (std::vector<int>{5}));
  EXPECT_EQ(four.ranks_over({"tp", "cp"}, 5), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(four.ranks_over({"dp", "cp"}, 2), (std::vector<int>{2, 3, 6, 7}));
  EXPECT_EQ(four.ranks_over({"dp", "tp"}, 7), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(four.ranks_over({"dp", "pp"}, 7), (std::vector<int>{3, 7}));

  // tensor parallelism as a 2 x 2 grid: rows, columns, and the whole grid.
  const MeshLayout grid({{"dp", 2}, {"tp_row", 2}, {"tp_col", 2}}, 8);
  EXPECT_EQ(grid.axis_ranks("tp_row", 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(grid.axis_ranks("tp_col", 5), (std::vector<int>{4, 5}));
  EXPECT_EQ(grid.ranks_over({"tp_row", "tp_col"}, 5), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_TRUE(grid.has_axis("tp_row"));
  EXPECT_FALSE(grid.has_axis("tp"));
  EXPECT_EQ(grid.axis_index("tp_col"), 2);
}

}  // namespace
}  // namespace colo::dist
