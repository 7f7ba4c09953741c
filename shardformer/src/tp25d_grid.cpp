#include <colo/dist/process_group.h>
#include <colo/shardformer/tensor_parallel_mode.h>
#include <colo/shardformer/tp25d_grid.h>
#include <colo/shardformer/tp2d_grid.h>
#include <fmt/format.h>

#include <stdexcept>
#include <utility>

namespace colo::shardformer {
namespace {

std::shared_ptr<dist::ProcessGroup> require_tp_25d(std::shared_ptr<dist::ProcessGroup> tp) {
  if (!tp) throw std::invalid_argument("Tp25dGrid: the tensor-parallel group is null");
  return tp;
}

}  // namespace

Tp25dGrid::SideAndDepth Tp25dGrid::side_and_depth_of(int tp_size, int depth) {
  if (const auto problem = tensor_parallel_size_problem("2.5d", tp_size, depth)) throw std::invalid_argument(*problem);
  return {*tensor_parallel_side("2.5d", tp_size, depth), depth};
}

Tp25dGrid::Tp25dGrid(std::shared_ptr<dist::ProcessGroup> tp, int depth)
    : tp_(require_tp_25d(std::move(tp))),
      q_(side_and_depth_of(tp_->size(), depth).q),
      depth_(depth),
      // Rank r = l * q² + (i * q + j): depth outermost (see the header: layer 0 holds every
      // distinct block in 2D's order), the layer's grid innermost (its SUMMA traffic, the
      // heaviest, between neighbouring ranks).
      mesh_(tp_, {{"tp_depth", depth_}, {"tp_layer", q_ * q_}}),
      layer_(mesh_.coordinate("tp_depth")),
      depth_group_(mesh_.group("tp_depth")),
      layer_grid_(std::make_shared<Tp2dGrid>(mesh_.group("tp_layer"))) {
  // The depth group's rank names the layer (a gather over it puts the layers' batch shares in
  // order), and the layer grid's ranks are the tp ranks less the layer's offset.
  if (depth_group_->rank() != layer_ || layer_grid_->tp().rank() != tp_->rank() - layer_ * q_ * q_) {
    throw std::logic_error(fmt::format("Tp25dGrid: tp rank {} is rank {} of its depth group and {} of its layer",
                                       tp_->rank(), depth_group_->rank(), layer_grid_->tp().rank()));
  }
}

int Tp25dGrid::row() const { return layer_grid_->row(); }
int Tp25dGrid::column() const { return layer_grid_->column(); }

}  // namespace colo::shardformer
