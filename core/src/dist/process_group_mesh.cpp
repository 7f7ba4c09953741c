#include <colo/dist/process_group.h>
#include <colo/dist/process_group_mesh.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <stdexcept>

namespace colo::dist {

ProcessGroupMesh::ProcessGroupMesh(std::shared_ptr<ProcessGroup> world, MeshShape shape,
                                   std::vector<MeshAxisSet> axis_sets)
    : world_(std::move(world)), layout_(std::move(shape), world_->size()), rank_(world_->rank()) {
  const auto& axes = layout_.shape();
  // Every rank walks the same axes and sets in the same order, so the members of each group
  // arrive at its creation together (new_subgroup's contract). Innermost axis first.
  axis_groups_.resize(axes.size());
  for (int i = static_cast<int>(axes.size()) - 1; i >= 0; --i) axis_groups_[i] = make_group({i});
  for (const auto& set : axis_sets) {
    const auto indices = layout_.axis_indices(set);
    if (indices.size() < 2 || indices.size() == axes.size()) continue;  // an axis's group, or the world
    const bool known = std::any_of(set_groups_.begin(), set_groups_.end(),
                                   [&](const SetGroup& made) { return made.indices == indices; });
    if (!known) set_groups_.push_back({indices, make_group(indices)});
  }
}

std::shared_ptr<ProcessGroup> ProcessGroupMesh::make_group(const std::vector<int>& indices) {
  const auto ranks = layout_.ranks_through(indices, rank_);
  if (static_cast<int>(ranks.size()) == world_->size()) return world_;
  std::vector<int> global;
  for (int r : ranks) global.push_back(world_->global_rank(r));
  // Same ranks as a group made before (the sizes decide, so every rank decides alike): reuse it.
  // Axes are not compared with each other, so that each axis keeps a group named after it.
  if (indices.size() > 1) {
    for (const auto& group : axis_groups_) {
      if (group && group->global_ranks() == global) return group;
    }
    for (const auto& made : set_groups_) {
      if (made.group->global_ranks() == global) return made.group;
    }
  }
  // The group's name says where it sits: "dp[pp1,tp0]" is the data-parallel group of stage 1,
  // "dp+tp[pp1]" the group over dp and tp of stage 1.
  const auto& axes = layout_.shape();
  const auto mine = layout_.coordinate_of(rank_);
  std::vector<std::string> members;
  std::vector<std::string> others;
  for (size_t a = 0; a < axes.size(); ++a) {
    if (std::find(indices.begin(), indices.end(), static_cast<int>(a)) != indices.end()) {
      members.push_back(axes[a].name);
    } else {
      others.push_back(fmt::format("{}{}", axes[a].name, mine[a]));
    }
  }
  return world_->new_subgroup(global, fmt::format("{}[{}]", fmt::join(members, "+"), fmt::join(others, ",")));
}

const std::shared_ptr<ProcessGroup>& ProcessGroupMesh::group(std::string_view axis) const {
  return axis_groups_[layout_.axis_index(axis)];
}

const std::shared_ptr<ProcessGroup>& ProcessGroupMesh::group_over(const MeshAxisSet& axes) const {
  const auto indices = layout_.axis_indices(axes);
  if (indices.size() == 1) return axis_groups_[indices[0]];
  if (indices.size() == layout_.shape().size()) return world_;
  for (const auto& made : set_groups_) {
    if (made.indices == indices) return made.group;
  }
  throw std::invalid_argument(fmt::format(
      "the mesh ({}) has no group over {{{}}}: name the set in the ProcessGroupMesh's axis_sets (groups are created "
      "together by every rank, at construction)",
      describe(), fmt::join(axes, ",")));
}

}  // namespace colo::dist
