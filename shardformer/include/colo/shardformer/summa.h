#pragma once

// SUMMA (van de Geijn & Watts 1997), the product of 2D tensor parallelism (Optimus), as one
// autograd function over a Tp2dGrid. Rank (i, j) holds the input block X_ij [..., in/q] (rows of
// batch block i, input features of block j) and the weight block W_ij [out/q, in/q] (as stored
// [out, in]: rows of output block j, columns of input block i: Linear2D's cut). Forward, in q
// steps k = 0 .. q-1: X_ik is broadcast along row i (from column k), W_kj along column j (from
// row k), and X_ik · W_kjᵀ is accumulated, so that
//   Y_ij = Σ_k X_ik · W_kjᵀ   [..., out/q],
// this rank's block of X·Wᵀ. No rank ever holds more than one block of X and of W at a time.
//
// Backward, the conjugate reductions, again in q steps (the blocks are broadcast again rather
// than kept from the forward, so that the saved activations stay one block):
//   dX_ik = Σ_j dY_ij · W_kj      each rank (i, j) forms its q terms (W_kj broadcast along the
//                                 column); the row group reduces term k to column k,
//   dW_kj = Σ_i dY_ijᵀ · X_ik     (X_ik broadcast along the row); the column group reduces term
//                                 k to row k.
// Each set of q reductions travels as one reduce-scatter of the q terms stacked (piece k to the
// group's rank k). docs/tensor_parallel_modes.md counts the bytes. The grid must outlive the graph.
#include <torch/types.h>

namespace colo::shardformer {

class Tp2dGrid;

torch::Tensor summa_linear(const torch::Tensor& x, const torch::Tensor& weight, const Tp2dGrid& grid);

}  // namespace colo::shardformer
