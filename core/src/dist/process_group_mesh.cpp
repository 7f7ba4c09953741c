#include <colo/dist/process_group.h>
#include <colo/dist/process_group_mesh.h>

#include <fmt/format.h>

#include <stdexcept>

namespace colo::dist {

const char* to_string(MeshAxis axis) {
  switch (axis) {
    case MeshAxis::kDp:
      return "dp";
    case MeshAxis::kPp:
      return "pp";
    case MeshAxis::kTp:
      return "tp";
  }
  throw std::invalid_argument("unknown MeshAxis");
}

namespace {

// The member of a {dp, pp, tp} triple that `axis` names: a switch, so that a new axis makes the
// compiler point here (-Wswitch) instead of falling through to tp.
template <typename T>
T& on_axis(MeshAxis axis, T& dp, T& pp, T& tp) {
  switch (axis) {
    case MeshAxis::kDp:
      return dp;
    case MeshAxis::kPp:
      return pp;
    case MeshAxis::kTp:
      return tp;
  }
  throw std::invalid_argument("unknown MeshAxis");
}

}  // namespace

int MeshShape::size(MeshAxis axis) const { return on_axis(axis, dp, pp, tp); }

int& MeshCoordinate::on(MeshAxis axis) { return on_axis(axis, dp, pp, tp); }
int MeshCoordinate::on(MeshAxis axis) const { return const_cast<MeshCoordinate*>(this)->on(axis); }

std::shared_ptr<ProcessGroup>& MeshGroups::on(MeshAxis axis) { return on_axis(axis, dp, pp, tp); }
const std::shared_ptr<ProcessGroup>& MeshGroups::on(MeshAxis axis) const {
  return const_cast<MeshGroups*>(this)->on(axis);
}

MeshShape ProcessGroupMesh::resolve(MeshShape shape, int world_size) {
  if (shape.pp < 1 || shape.tp < 1 || shape.dp < 0) {
    throw std::invalid_argument(fmt::format("mesh sizes must be positive (dp may be 0 = inferred), got dp={} pp={} tp={}",
                                            shape.dp, shape.pp, shape.tp));
  }
  const int model_parallel = shape.pp * shape.tp;
  if (shape.dp == 0) {
    if (world_size % model_parallel != 0) {
      throw std::invalid_argument(fmt::format(
          "world size {} is not divisible by pp_size x tp_size = {} x {} = {}; choose sizes whose product divides {}",
          world_size, shape.pp, shape.tp, model_parallel, world_size));
    }
    shape.dp = world_size / model_parallel;
  }
  if (shape.dp * model_parallel != world_size) {
    throw std::invalid_argument(fmt::format(
        "dp x pp x tp = {} x {} x {} = {} ranks, but the job has {}; set dp_size to {} or leave it unset",
        shape.dp, shape.pp, shape.tp, shape.dp * model_parallel, world_size,
        world_size % model_parallel == 0 ? fmt::format("{}", world_size / model_parallel) : std::string("(none fits)")));
  }
  return shape;
}

ProcessGroupMesh::ProcessGroupMesh(std::shared_ptr<ProcessGroup> world, MeshShape shape)
    : shape_(resolve(shape, world->size())), rank_(world->rank()) {
  groups_.world = world;
  const auto c = coordinate();
  // Every rank walks the same axes in the same order, so the members of each group arrive at
  // its creation together (new_subgroup's contract).
  for (const MeshAxis axis : {MeshAxis::kTp, MeshAxis::kPp, MeshAxis::kDp}) {
    auto& group = groups_.on(axis);
    const auto ranks = axis_ranks(axis, rank_);
    if (static_cast<int>(ranks.size()) == world->size()) {
      group = world;
      continue;
    }
    std::vector<int> global;
    for (int r : ranks) global.push_back(world->global_rank(r));
    // The group's name says where it sits: "dp[pp1,tp0]" is the data-parallel group of stage 1.
    std::vector<std::string> others;
    for (const MeshAxis other : kMeshAxes) {
      if (other != axis) others.push_back(fmt::format("{}{}", to_string(other), c.on(other)));
    }
    group = world->new_subgroup(global, fmt::format("{}[{},{}]", to_string(axis), others[0], others[1]));
  }
}

MeshCoordinate ProcessGroupMesh::coordinate_of(int rank) const {
  MeshCoordinate c;
  c.tp = rank % shape_.tp;
  c.pp = (rank / shape_.tp) % shape_.pp;
  c.dp = rank / (shape_.tp * shape_.pp);
  return c;
}

int ProcessGroupMesh::rank_of(const MeshCoordinate& c) const {
  return (c.dp * shape_.pp + c.pp) * shape_.tp + c.tp;
}

std::vector<int> ProcessGroupMesh::axis_ranks(MeshAxis axis, int rank) const {
  const MeshCoordinate base = coordinate_of(rank);
  std::vector<int> ranks;
  for (int i = 0; i < shape_.size(axis); ++i) {
    MeshCoordinate c = base;
    c.on(axis) = i;
    ranks.push_back(rank_of(c));
  }
  return ranks;
}

std::string ProcessGroupMesh::describe() const {
  return fmt::format("dp={} pp={} tp={}", shape_.dp, shape_.pp, shape_.tp);
}

}  // namespace colo::dist
