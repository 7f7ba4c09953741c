#pragma once

#include <memory>
#include <string>
#include <vector>

namespace colo::dist {

class ProcessGroup;

// Sizes of the three parallel axes. dp = 0 means "whatever the world size leaves".
struct MeshShape {
  int dp = 0;
  int pp = 1;
  int tp = 1;
};

// This rank's position on each axis.
struct MeshCoordinate {
  int dp = 0;
  int pp = 0;
  int tp = 0;
};

// The groups a rank belongs to, one per axis, plus the world. Handed to whoever needs them;
// nothing reads a "current group".
struct MeshGroups {
  std::shared_ptr<ProcessGroup> world;
  std::shared_ptr<ProcessGroup> dp;
  std::shared_ptr<ProcessGroup> pp;
  std::shared_ptr<ProcessGroup> tp;
};

// Lays global ranks out as (dp, pp, tp), tp innermost so that neighbouring ranks (the fastest
// links) share a tensor-parallel group: rank = (dp_index * pp + pp_index) * tp + tp_index.
// Builds each axis-slice group once. Throws std::invalid_argument when the shape does not fit
// the world size, saying which sizes would.
class ProcessGroupMesh {
 public:
  ProcessGroupMesh(std::shared_ptr<ProcessGroup> world, MeshShape shape);

  const MeshShape& shape() const { return shape_; }
  const MeshGroups& groups() const { return groups_; }
  MeshCoordinate coordinate() const { return coordinate_of(rank_); }
  MeshCoordinate coordinate_of(int global_rank) const;
  int global_rank_of(const MeshCoordinate& c) const;
  // Global ranks of the slice through `global_rank` along an axis ("dp", "pp" or "tp").
  std::vector<int> axis_ranks(const std::string& axis, int global_rank) const;

  // Validates a shape against a world size without creating groups (used by plugins' validate).
  static MeshShape resolve(MeshShape shape, int world_size);

 private:
  MeshShape shape_;
  int rank_;
  MeshGroups groups_;
};

}  // namespace colo::dist
