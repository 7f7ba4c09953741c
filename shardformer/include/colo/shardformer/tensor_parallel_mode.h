#pragma once

// The tensor-parallel modes hybrid_parallel's tp_mode names (issue 35): 1d (Megatron's column and
// row splits over tp_size ranks), 2d (Optimus/SUMMA on a q × q grid), 2.5d (Tesseract: depth layers
// of the q × q grid) and 3d (a q × q × q cube). Each mode fixes which tp_size it can use; these
// functions say whether a size fits and, when not, which sizes near it do.
#include <optional>
#include <string>
#include <vector>

namespace colo {

// "1d", "2d", "2.5d", "3d".
const std::vector<std::string>& tensor_parallel_modes();

// The side q of the mode's grid for tp_size ranks (1d: tp_size itself; 2.5d: tp_size = q²·depth),
// or nullopt when the size does not fit the mode.
std::optional<int> tensor_parallel_side(const std::string& mode, int tp_size, int depth);

// Why tp_size (and depth, for 2.5d) does not fit `mode`, naming the nearest sizes that do, e.g.
// "tp_mode=2d needs tp_size = q² (a q × q grid), got 6: use 4 or 9"; nullopt when it fits.
std::optional<std::string> tensor_parallel_size_problem(const std::string& mode, int tp_size, int depth);

}  // namespace colo
