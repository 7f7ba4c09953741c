#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace colo::dist {

// One parallel axis of a mesh ("axis" for a mesh axis, "dim" for a tensor dimension): its name
// and how many ranks it spans. Size 0 means "whatever the world size leaves" (one axis at most).
// The standard axes are named kDp, kPp, kTp; any other identifier ("cp", "tp_row") names an
// axis too.
struct MeshAxis {
  std::string name;
  int size = 0;

  static constexpr const char* kDp = "dp";  // data parallel
  static constexpr const char* kPp = "pp";  // pipeline stages
  static constexpr const char* kTp = "tp";  // tensor parallel
};

// The axes of a mesh, outermost first: the last is innermost (its neighbours are consecutive
// ranks).
using MeshShape = std::vector<MeshAxis>;
// A rank's index on each axis, in the shape's order.
using MeshCoordinate = std::vector<int>;
// Names of some axes of a mesh, in any order ({"dp", "tp"}).
using MeshAxisSet = std::vector<std::string>;

// The standard layout {dp, pp, tp}: dp may be 0 (what the world leaves); pp and tp must be at
// least 1. Throws std::invalid_argument naming the sizes otherwise.
MeshShape dp_pp_tp_shape(int dp, int pp, int tp);

// Where each rank of a world of `world_size` sits on the axes of a shape: arithmetic only, no
// process groups (ProcessGroupMesh makes those). For axes a0..a(n-1) of sizes s0..s(n-1), the
// last innermost:
//   rank = ((c0 * s1 + c1) * s2 + c2) ... * s(n-1) + c(n-1),
// for the standard {dp, pp, tp}: rank = (dp_index * pp + pp_index) * tp + tp_index.
// The slice through a rank over a set of axes holds the ranks that differ from it only on those
// axes, ascending (their coordinates on the set's axes read in the shape's order, the outermost
// slowest).
class MeshLayout {
 public:
  // Resolves the shape's 0 size. Throws std::invalid_argument when the shape does not fit the
  // world size (naming the axes and sizes, and which sizes would fit), or an axis name is empty,
  // repeated or not an identifier.
  MeshLayout(MeshShape shape, int world_size);

  // The shape with its 0 size resolved.
  const MeshShape& shape() const { return shape_; }
  int world_size() const { return world_size_; }
  int size(std::string_view axis) const { return shape_[axis_index(axis)].size; }
  // Position of an axis in the shape; throws std::invalid_argument naming the mesh's axes.
  int axis_index(std::string_view axis) const;
  bool has_axis(std::string_view axis) const;
  // Positions of a set's axes, ascending; throws for an empty set, an unknown or repeated axis.
  std::vector<int> axis_indices(const MeshAxisSet& axes) const;

  MeshCoordinate coordinate_of(int rank) const;
  int coordinate_of(int rank, std::string_view axis) const { return coordinate_of(rank)[axis_index(axis)]; }
  int rank_of(const MeshCoordinate& c) const;
  // Ranks of the slice through `rank` along an axis, and over a set of axes (ascending).
  std::vector<int> axis_ranks(std::string_view axis, int rank) const;
  std::vector<int> ranks_over(const MeshAxisSet& axes, int rank) const;
  // The same over axis positions (ascending, as axis_indices gives them).
  std::vector<int> ranks_through(const std::vector<int>& axis_indices, int rank) const;
  // "dp=2 pp=2 tp=1".
  std::string describe() const;

  // Validates a shape against a world size and fills in its 0 size.
  static MeshShape resolve(MeshShape shape, int world_size);

 private:
  MeshShape shape_;
  int world_size_;
};

}  // namespace colo::dist
