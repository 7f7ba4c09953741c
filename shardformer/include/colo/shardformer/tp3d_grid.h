#pragma once

// The q×q×q cube of 3D tensor parallelism (Agarwal et al. 1995's 3D matrix product; Bian et al.
// 2021): the tp = q³ ranks of a tensor-parallel group, rank r at (i, j, k) with
// r = i·q² + j·q + k. Every activation is cut three ways (batch rows q² ways, features q ways) in
// one of two layouts, and a linear turns one into the other:
//   outer (the residual stream between blocks, LayerNorm's input): rows block j·q + k of q²,
//         features block i;
//   inner (attention's heads, the MLP's hidden units): rows block j·q + i, features block k.
// A linear from outer to inner (qkv, fc1) holds the weight block W[out_k, in_i] cut once more by
// j (a [out/q, in/q²] piece: the in-block i's j-th sub-block); its input is gathered over k (the
// j-th q-th of the batch), its weight over j, and the partial product (over in-block i) is
// reduce-scattered over i into the inner layout. From inner to outer (proj, fc2) the roles of i
// and k swap (the weight W[out_i, in_k] cut by j along the out dim: [out/q², in/q]): j is always
// the weight's axis, i always indexes the residual stream's features. Which dim j cuts (the one i
// indexes) is what puts every weight's q³ distinct pieces in tp-rank order (cuts i, j, k), the
// order nn::unshard and the checkpoints read (linear_3d.h).
//
// Groups (dist::ProcessGroupMesh over the tp group, axes {tp3d_i, tp3d_j, tp3d_k}):
//   i, j, k groups: the q ranks differing only on that axis, ordered by it;
//   jk plane: the q² ranks with this i, ordered j·q + k (the residual stream's features i are
//             theirs: the LayerNorms and the outer-side biases are cut q³ ways and gathered here);
//   ij plane: the q² ranks with this k, ordered i·q + j (an inner-side bias's copies).
// Creating groups is collective: every rank of the tp group constructs its cube at the same point
// among its other group creations. The cube must outlive every autograd graph built through it.
#include <colo/dist/process_group_mesh.h>

#include <memory>

namespace colo::dist {
class ProcessGroup;
}

namespace colo::shardformer {

// Which of the cube's two activation layouts a tensor is in (see above).
enum class Tp3dLayout { kOuter, kInner };

class Tp3dGrid {
 public:
  // Throws std::invalid_argument for a null group, or a size that is not a cube (see side_of).
  explicit Tp3dGrid(std::shared_ptr<dist::ProcessGroup> tp);

  // q for tp = q³; throws std::invalid_argument naming the nearest cubes otherwise
  // ("tp_mode=3d needs tp_size = q³ (a q × q × q cube), got 4: use 1 or 8").
  static int side_of(int tp_size);

  int q() const { return q_; }
  int i() const { return i_; }
  int j() const { return j_; }
  int k() const { return k_; }
  dist::ProcessGroup& tp() const { return *tp_; }
  dist::ProcessGroup& i_group() const { return *i_group_; }
  dist::ProcessGroup& j_group() const { return *j_group_; }
  dist::ProcessGroup& k_group() const { return *k_group_; }
  dist::ProcessGroup& jk_plane() const { return *jk_plane_; }
  dist::ProcessGroup& ij_plane() const { return *ij_plane_; }

  // In `layout`: the group over which the features are split (outer: i; inner: k), and the one
  // over which the rows of this rank's j-th q-th of the batch are (outer: k; inner: i).
  dist::ProcessGroup& feature_group(Tp3dLayout layout) const;
  dist::ProcessGroup& row_group(Tp3dLayout layout) const;
  // This rank's feature block (of q) and row block (of q²) in `layout`.
  int feature_block(Tp3dLayout layout) const;
  int row_block(Tp3dLayout layout) const;

 private:
  std::shared_ptr<dist::ProcessGroup> tp_;
  int q_;
  dist::ProcessGroupMesh mesh_;
  int i_, j_, k_;
  std::shared_ptr<dist::ProcessGroup> i_group_, j_group_, k_group_, jk_plane_, ij_plane_;
};

}  // namespace colo::shardformer
