#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

namespace colo::dist {

class ProcessGroup;

// A parallel axis of the mesh ("axis" for a mesh axis, "dim" for a tensor dimension).
enum class MeshAxis { kDp, kPp, kTp };
// "dp", "pp", "tp".
const char* to_string(MeshAxis axis);
inline constexpr std::array<MeshAxis, 3> kMeshAxes{MeshAxis::kDp, MeshAxis::kPp, MeshAxis::kTp};

// Sizes of the three parallel axes. dp = 0 means "whatever the world size leaves".
struct MeshShape {
  int dp = 0;
  int pp = 1;
  int tp = 1;
  int size(MeshAxis axis) const;
};

// This rank's position on each axis.
struct MeshCoordinate {
  int dp = 0;
  int pp = 0;
  int tp = 0;
  int& on(MeshAxis axis);
  int on(MeshAxis axis) const;
};

// The groups a rank belongs to, one per axis, plus the world. Handed to whoever needs them;
// nothing reads a "current group".
struct MeshGroups {
  std::shared_ptr<ProcessGroup> world;
  std::shared_ptr<ProcessGroup> dp;
  std::shared_ptr<ProcessGroup> pp;
  std::shared_ptr<ProcessGroup> tp;
  const std::shared_ptr<ProcessGroup>& on(MeshAxis axis) const;
  std::shared_ptr<ProcessGroup>& on(MeshAxis axis);
};

// Lays the ranks of a group (the job's world, or any group a plugin is given) out as (dp, pp,
// tp), tp innermost so that neighbouring ranks (the fastest links) share a tensor-parallel group:
// rank = (dp_index * pp + pp_index) * tp + tp_index. Ranks here are ranks within that group
// (the global ranks when it is the world).
// Builds each axis-slice group once; an axis that spans the whole world uses the world group
// itself (no second communicator over the same ranks). Throws std::invalid_argument when the
// shape does not fit the world size, saying which sizes would.
class ProcessGroupMesh {
 public:
  ProcessGroupMesh(std::shared_ptr<ProcessGroup> world, MeshShape shape);

  const MeshShape& shape() const { return shape_; }
  const MeshGroups& groups() const { return groups_; }
  const std::shared_ptr<ProcessGroup>& group(MeshAxis axis) const { return groups_.on(axis); }
  int size(MeshAxis axis) const { return shape_.size(axis); }
  // This rank's coordinate, and its index on one axis.
  MeshCoordinate coordinate() const { return coordinate_of(rank_); }
  int coordinate(MeshAxis axis) const { return coordinate().on(axis); }
  MeshCoordinate coordinate_of(int rank) const;
  int rank_of(const MeshCoordinate& c) const;
  // Ranks of the slice through `rank` along an axis.
  std::vector<int> axis_ranks(MeshAxis axis, int rank) const;
  // "dp=2 pp=2 tp=1".
  std::string describe() const;

  // Validates a shape against a world size without creating groups (used by plugins' validate).
  static MeshShape resolve(MeshShape shape, int world_size);

 private:
  MeshShape shape_;
  int rank_;
  MeshGroups groups_;
};

}  // namespace colo::dist
