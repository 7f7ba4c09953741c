#include <colo/dist/process_group.h>
#include <colo/shardformer/tensor_parallel_mode.h>
#include <colo/shardformer/tp3d_grid.h>
#include <fmt/format.h>

#include <stdexcept>
#include <utility>

namespace colo::shardformer {
namespace {

std::shared_ptr<dist::ProcessGroup> require_cube_tp(std::shared_ptr<dist::ProcessGroup> tp) {
  if (!tp) throw std::invalid_argument("Tp3dGrid: the tensor-parallel group is null");
  return tp;
}

}  // namespace

int Tp3dGrid::side_of(int tp_size) {
  if (const auto problem = tensor_parallel_size_problem("3d", tp_size, 1)) throw std::invalid_argument(*problem);
  return *tensor_parallel_side("3d", tp_size, 1);
}

Tp3dGrid::Tp3dGrid(std::shared_ptr<dist::ProcessGroup> tp)
    : tp_(require_cube_tp(std::move(tp))),
      q_(side_of(tp_->size())),
      // k innermost: the gathers of the outer layout's rows and the inner side's products run
      // between neighbouring ranks (the fastest links).
      mesh_(tp_, {{"tp3d_i", q_}, {"tp3d_j", q_}, {"tp3d_k", q_}}, {{"tp3d_j", "tp3d_k"}, {"tp3d_i", "tp3d_j"}}),
      i_(mesh_.coordinate("tp3d_i")),
      j_(mesh_.coordinate("tp3d_j")),
      k_(mesh_.coordinate("tp3d_k")),
      i_group_(mesh_.group("tp3d_i")),
      j_group_(mesh_.group("tp3d_j")),
      k_group_(mesh_.group("tp3d_k")),
      jk_plane_(mesh_.group_over({"tp3d_j", "tp3d_k"})),
      ij_plane_(mesh_.group_over({"tp3d_i", "tp3d_j"})) {
  // The modules name a piece by its index in a group (the k-th piece of a gather, the plane's
  // j·q + k-th sub-block of a LayerNorm's weight): a group's rank must be that index.
  if (i_group_->rank() != i_ || j_group_->rank() != j_ || k_group_->rank() != k_ ||
      jk_plane_->rank() != j_ * q_ + k_ || ij_plane_->rank() != i_ * q_ + j_ ||
      tp_->rank() != (i_ * q_ + j_) * q_ + k_) {
    throw std::logic_error(fmt::format("Tp3dGrid: tp rank {} at ({}, {}, {}) is rank {}, {}, {} of its i, j, k groups "
                                       "and {}, {} of its jk and ij planes",
                                       tp_->rank(), i_, j_, k_, i_group_->rank(), j_group_->rank(), k_group_->rank(),
                                       jk_plane_->rank(), ij_plane_->rank()));
  }
}

dist::ProcessGroup& Tp3dGrid::feature_group(Tp3dLayout layout) const {
  return layout == Tp3dLayout::kOuter ? *i_group_ : *k_group_;
}
dist::ProcessGroup& Tp3dGrid::row_group(Tp3dLayout layout) const {
  return layout == Tp3dLayout::kOuter ? *k_group_ : *i_group_;
}
int Tp3dGrid::feature_block(Tp3dLayout layout) const { return layout == Tp3dLayout::kOuter ? i_ : k_; }
int Tp3dGrid::row_block(Tp3dLayout layout) const { return j_ * q_ + (layout == Tp3dLayout::kOuter ? k_ : i_); }

}  // namespace colo::shardformer
