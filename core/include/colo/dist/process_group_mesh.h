#pragma once

#include <colo/dist/mesh_layout.h>

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace colo::dist {

class ProcessGroup;

// The process groups of a mesh: ranks of a group (the job's world, or any group a plugin is
// given) laid out over named axes as MeshLayout says, the last axis innermost so that
// neighbouring ranks (the fastest links) share its groups. The standard layout is
// dp_pp_tp_shape(dp, pp, tp). Ranks here are ranks within that group (the global ranks when it is
// the world).
//
// Groups: the group of an axis holds the ranks that differ from this one only on that axis; the
// group over a set of axes, the ranks that differ only on those axes, ordered by rank. A group
// that spans the whole world is the world group itself (no second communicator over the same
// ranks); an axis of size 1 gets a group of its own of one rank. The group over a single axis is
// that axis's group, and the group over every axis is the world.
//
// Ordering rule. Creating a c10d group is collective: each of its members must take part, in the
// same order as its other group creations. So every group is made here, in the constructor, in
// an order that does not depend on the rank: one group per axis, innermost axis first, then one
// per set of `axis_sets`, in the order given. Every rank of `world` must construct its mesh with
// the same shape and axis_sets, at the same point among its other group creations. A set whose
// ranks are those of a group made before (its other axes have size 1) reuses that group.
// group_over() answers only the sets declared here (and single axes, and all of them).
class ProcessGroupMesh {
 public:
  // Throws std::invalid_argument when the shape does not fit the world (see MeshLayout) or a set
  // names an axis the shape lacks.
  ProcessGroupMesh(std::shared_ptr<ProcessGroup> world, MeshShape shape, std::vector<MeshAxisSet> axis_sets = {});

  const MeshLayout& layout() const { return layout_; }
  // The shape with its 0 size resolved.
  const MeshShape& shape() const { return layout_.shape(); }
  const std::shared_ptr<ProcessGroup>& world() const { return world_; }
  // The group of one axis; throws std::invalid_argument naming the mesh's axes for an unknown one.
  const std::shared_ptr<ProcessGroup>& group(std::string_view axis) const;
  // The group over a set of axes; throws std::invalid_argument for a set of two or more axes (not
  // all) that was not declared at construction, or an unknown axis.
  const std::shared_ptr<ProcessGroup>& group_over(const MeshAxisSet& axes) const;
  int size(std::string_view axis) const { return layout_.size(axis); }

  // This rank's coordinate, and its index on one axis.
  MeshCoordinate coordinate() const { return layout_.coordinate_of(rank_); }
  int coordinate(std::string_view axis) const { return layout_.coordinate_of(rank_, axis); }
  MeshCoordinate coordinate_of(int rank) const { return layout_.coordinate_of(rank); }
  int rank_of(const MeshCoordinate& c) const { return layout_.rank_of(c); }
  // Ranks of the slice through `rank` along an axis, and over a set of axes.
  std::vector<int> axis_ranks(std::string_view axis, int rank) const { return layout_.axis_ranks(axis, rank); }
  std::vector<int> ranks_over(const MeshAxisSet& axes, int rank) const { return layout_.ranks_over(axes, rank); }
  // "dp=2 pp=2 tp=1".
  std::string describe() const { return layout_.describe(); }

  // Validates a shape against a world size without creating groups (used by plugins' validate).
  static MeshShape resolve(MeshShape shape, int world_size) { return MeshLayout::resolve(std::move(shape), world_size); }

 private:
  // Makes (or reuses) the group of this rank's slice over the axes at `indices`.
  std::shared_ptr<ProcessGroup> make_group(const std::vector<int>& indices);

  struct SetGroup {
    std::vector<int> indices;  // ascending
    std::shared_ptr<ProcessGroup> group;
  };

  std::shared_ptr<ProcessGroup> world_;
  MeshLayout layout_;
  int rank_;
  std::vector<std::shared_ptr<ProcessGroup>> axis_groups_;  // by axis index
  std::vector<SetGroup> set_groups_;                        // declared sets, in creation order
};

}  // namespace colo::dist
