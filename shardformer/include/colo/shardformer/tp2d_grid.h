#pragma once

// The q×q grid of 2D tensor parallelism (Optimus; Xu et al. 2021, SUMMA's layout): the tp = q²
// ranks of a tensor-parallel group, rank r of that group at row i = r / q and column j = r % q.
// Activations are cut into q×q blocks (batch rows by i, features by j) and so are linear weights
// (tp2d_mappings.h, linear_2d.h); the modules talk along the grid's rows and columns only, so
// the grid holds those two groups:
//   row group (same i, ranks ordered by j: this rank is number j in it),
//   column group (same j, ranks ordered by i: this rank is number i in it).
// Built with dist::ProcessGroupMesh over the tp group with axes {tp_row: q, tp_col: q}: the row
// group is the mesh's "tp_col" axis group (ranks that differ only in their column), the column
// group its "tp_row" axis group.
//
// Creating groups is collective: every rank of the tp group constructs its grid at the same point
// among its other group creations (ProcessGroupMesh's ordering rule). The grid must outlive every
// autograd graph built through its groups (the mappings and modules keep its address).
#include <colo/dist/process_group_mesh.h>

#include <memory>

namespace colo::dist {
class ProcessGroup;
}

namespace colo::shardformer {

class Tp2dGrid {
 public:
  // Throws std::invalid_argument for a null group, or a size that is not a square (see side_of).
  explicit Tp2dGrid(std::shared_ptr<dist::ProcessGroup> tp);

  // q for tp = q²; throws std::invalid_argument naming the nearest squares otherwise
  // ("tp_mode=2d needs tp_size = q², got 6: use 4 or 9").
  static int side_of(int tp_size);

  int q() const { return q_; }
  int row() const { return row_; }     // i
  int column() const { return column_; }  // j
  dist::ProcessGroup& tp() const { return *tp_; }
  dist::ProcessGroup& row_group() const { return *row_group_; }
  dist::ProcessGroup& column_group() const { return *column_group_; }
  const dist::ProcessGroupMesh& mesh() const { return mesh_; }

 private:
  std::shared_ptr<dist::ProcessGroup> tp_;
  int q_;
  dist::ProcessGroupMesh mesh_;
  int row_;
  int column_;
  std::shared_ptr<dist::ProcessGroup> row_group_;
  std::shared_ptr<dist::ProcessGroup> column_group_;
};

}  // namespace colo::shardformer
