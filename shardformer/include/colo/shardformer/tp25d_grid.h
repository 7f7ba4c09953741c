#pragma once

// The grid of 2.5D tensor parallelism (Tesseract; Wang et al. 2021): the tp = q²·d ranks of a
// tensor-parallel group as d layers ("depth") of a q×q 2D grid. Rank r of the tp group is in
// layer l = r / q², and at row i = (r % q²) / q, column j = r % q of that layer's grid. Within a
// layer everything is 2D (tp2d_grid.h): the same weight blocks, SUMMA along the layer's rows and
// columns. What depth adds: the batch is split over the layers too (layer l keeps the l-th 1/d of
// it, cut q ways by row inside the layer), and each weight block is replicated over the d layers,
// so the gradients of the d copies (each from its own share of the batch) are summed over the
// depth group: the d ranks at the same (i, j) in every layer, ordered by layer.
//
// Depth is the outermost axis so that the first q² ranks (layer 0) hold every distinct block in
// 2D's tp-rank order and the other layers repeat them: that is what nn::pieces_of's rule
// ("distinct pieces on the group's first ranks, repeated T / pieces times") expects, so 2D's cuts
// serve checkpoints and the gradient norm unchanged. d = 1 is exactly 2D (the layer is the tp
// group itself; the depth group one rank).
//
// Built with dist::ProcessGroupMesh over the tp group with axes {tp_depth: d, tp_layer: q²}, then
// a Tp2dGrid over the layer group (reused whole: its row and column groups are made inside the
// layer). Collective, like Tp2dGrid: every rank of the tp group constructs it at the same point
// among its group creations; it must outlive every autograd graph built through it.
#include <colo/dist/process_group_mesh.h>

#include <memory>

namespace colo::dist {
class ProcessGroup;
}

namespace colo::shardformer {

class Tp2dGrid;

class Tp25dGrid {
 public:
  // Throws std::invalid_argument for a null group, or a size that is not q²·depth (see
  // side_and_depth_of).
  Tp25dGrid(std::shared_ptr<dist::ProcessGroup> tp, int depth);

  struct SideAndDepth {
    int q;
    int depth;
  };
  // {q, depth} for tp_size = q²·depth; throws std::invalid_argument naming the nearest sizes
  // otherwise ("tp_mode=2.5d with tp_depth=2 needs tp_size = q² × 2 (2 layers of a q × q grid),
  // got 12: use 8 or 18").
  static SideAndDepth side_and_depth_of(int tp_size, int depth);

  int q() const { return q_; }
  int depth() const { return depth_; }
  int layer() const { return layer_; }  // l
  int row() const;                      // i, in the layer's grid
  int column() const;                   // j
  dist::ProcessGroup& tp() const { return *tp_; }
  // The layer's q×q grid (its tp() is the layer group), shared so that the 2D modules can hold it.
  const std::shared_ptr<Tp2dGrid>& layer_grid() const { return layer_grid_; }
  // The d ranks holding the same blocks (same i and j), ordered by layer: this rank is number l.
  // Shared, for the same reason.
  const std::shared_ptr<dist::ProcessGroup>& depth_group() const { return depth_group_; }

 private:
  std::shared_ptr<dist::ProcessGroup> tp_;
  int q_;
  int depth_;
  dist::ProcessGroupMesh mesh_;
  int layer_;
  std::shared_ptr<dist::ProcessGroup> depth_group_;
  std::shared_ptr<Tp2dGrid> layer_grid_;
};

}  // namespace colo::shardformer
