#pragma once
// Units the planner's sources print and compare in (one definition: a unity build puts several
// sources into one translation unit, where file-local copies would collide).

namespace colo::planner {

inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

}  // namespace colo::planner
