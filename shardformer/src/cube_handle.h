#pragma once

// Autograd functions keep non-tensor arguments in ctx->saved_data, which holds IValues: the 3D
// cube travels there as its address (the cube outlives the graph: see tp3d_grid.h).
#include <colo/shardformer/tp3d_grid.h>

#include <cstdint>

namespace colo::shardformer {

inline int64_t cube_handle(const Tp3dGrid& grid) { return reinterpret_cast<int64_t>(&grid); }
inline const Tp3dGrid& cube_at(int64_t handle) { return *reinterpret_cast<const Tp3dGrid*>(handle); }

}  // namespace colo::shardformer
