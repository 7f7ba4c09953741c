#include <colo/dist/process_group.h>
#include <colo/dist/process_group_mesh.h>

#include <fmt/format.h>

#include <stdexcept>

namespace colo::dist {

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
    : shape_(resolve(shape, world->size())), rank_(world->global_rank(world->rank())) {
  groups_.world = world;
  // Every rank walks the same axes in the same order, so the members of each group arrive at
  // its creation together (new_subgroup's contract).
  for (const char* axis : {"tp", "pp", "dp"}) {
    const auto ranks = axis_ranks(axis, rank_);
    const auto c = coordinate();
    const std::string name = std::string(axis) == "tp" ? fmt::format("tp[dp{},pp{}]", c.dp, c.pp)
                             : std::string(axis) == "pp" ? fmt::format("pp[dp{},tp{}]", c.dp, c.tp)
                                                         : fmt::format("dp[pp{},tp{}]", c.pp, c.tp);
    auto group = world->new_subgroup(ranks, name);
    (std::string(axis) == "tp" ? groups_.tp : std::string(axis) == "pp" ? groups_.pp : groups_.dp) = group;
  }
}

MeshCoordinate ProcessGroupMesh::coordinate_of(int global_rank) const {
  MeshCoordinate c;
  c.tp = global_rank % shape_.tp;
  c.pp = (global_rank / shape_.tp) % shape_.pp;
  c.dp = global_rank / (shape_.tp * shape_.pp);
  return c;
}

int ProcessGroupMesh::global_rank_of(const MeshCoordinate& c) const {
  return (c.dp * shape_.pp + c.pp) * shape_.tp + c.tp;
}

std::vector<int> ProcessGroupMesh::axis_ranks(const std::string& axis, int global_rank) const {
  const MeshCoordinate base = coordinate_of(global_rank);
  std::vector<int> ranks;
  const int n = axis == "dp" ? shape_.dp : axis == "pp" ? shape_.pp : axis == "tp" ? shape_.tp : -1;
  if (n < 0) throw std::invalid_argument(fmt::format("unknown mesh axis '{}'; use dp, pp or tp", axis));
  for (int i = 0; i < n; ++i) {
    MeshCoordinate c = base;
    (axis == "dp" ? c.dp : axis == "pp" ? c.pp : c.tp) = i;
    ranks.push_back(global_rank_of(c));
  }
  return ranks;
}

}  // namespace colo::dist
