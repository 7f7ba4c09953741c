#include <colo/dist/process_group.h>
#include <colo/shardformer/tensor_parallel_mode.h>
#include <colo/shardformer/tp2d_grid.h>
#include <fmt/format.h>

#include <stdexcept>
#include <utility>

namespace colo::shardformer {
namespace {

std::shared_ptr<dist::ProcessGroup> require_tp_2d(std::shared_ptr<dist::ProcessGroup> tp) {
  if (!tp) throw std::invalid_argument("Tp2dGrid: the tensor-parallel group is null");
  return tp;
}

}  // namespace

int Tp2dGrid::side_of(int tp_size) {
  if (const auto problem = tensor_parallel_size_problem("2d", tp_size, 1)) throw std::invalid_argument(*problem);
  return *tensor_parallel_side("2d", tp_size, 1);
}

Tp2dGrid::Tp2dGrid(std::shared_ptr<dist::ProcessGroup> tp)
    : tp_(require_tp_2d(std::move(tp))),
      q_(side_of(tp_->size())),
      // Rank r = i * q + j: the row axis outermost, the column innermost (neighbouring ranks, the
      // fastest links, share a row: SUMMA's input broadcasts run along it).
      mesh_(tp_, {{"tp_row", q_}, {"tp_col", q_}}),
      row_(mesh_.coordinate("tp_row")),
      column_(mesh_.coordinate("tp_col")),
      row_group_(mesh_.group("tp_col")),
      column_group_(mesh_.group("tp_row")) {
  // The mappings name a block's source by its index on the line (broadcast from column k, the
  // k-th piece of a reduce-scatter): a group's rank must be that index.
  if (row_group_->rank() != column_ || column_group_->rank() != row_) {
    throw std::logic_error(fmt::format("Tp2dGrid: rank ({}, {}) is rank {} of its row group and {} of its column group",
                                       row_, column_, row_group_->rank(), column_group_->rank()));
  }
}

}  // namespace colo::shardformer
