#include <colo/dist/mesh_layout.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <stdexcept>
#include <utility>

namespace colo::dist {

namespace {

// "dp x pp x tp" (or "dp_size x pp_size", with a suffix) over some axes of a shape.
std::string joined_names(const MeshShape& shape, const std::vector<int>& indices, const char* suffix = "") {
  std::vector<std::string> names;
  for (int i : indices) names.push_back(shape[i].name + suffix);
  return fmt::format("{}", fmt::join(names, " x "));
}

std::string joined_sizes(const MeshShape& shape, const std::vector<int>& indices) {
  std::vector<int> sizes;
  for (int i : indices) sizes.push_back(shape[i].size);
  return fmt::format("{}", fmt::join(sizes, " x "));
}

// "dp=0 pp=-1 tp=1".
std::string listed(const MeshShape& shape) {
  std::vector<std::string> parts;
  for (const auto& axis : shape) parts.push_back(fmt::format("{}={}", axis.name, axis.size));
  return fmt::format("{}", fmt::join(parts, " "));
}

std::string names_of(const MeshShape& shape) {
  std::vector<std::string> names;
  for (const auto& axis : shape) names.push_back(axis.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

bool is_identifier(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_';
  });
}

void check_names(const MeshShape& shape) {
  if (shape.empty()) throw std::invalid_argument("a mesh needs at least one axis");
  for (size_t i = 0; i < shape.size(); ++i) {
    if (!is_identifier(shape[i].name)) {
      throw std::invalid_argument(fmt::format(
          "mesh axis {} is named '{}': name each axis with letters, digits and '_' (not starting with a digit)", i,
          shape[i].name));
    }
    for (size_t j = 0; j < i; ++j) {
      if (shape[j].name == shape[i].name) {
        throw std::invalid_argument(
            fmt::format("mesh axis '{}' appears twice in ({}): give each axis its own name", shape[i].name,
                        names_of(shape)));
      }
    }
  }
}

// For a shape that does not multiply to the world size: the single size changes that would.
std::string sizes_that_fit(const MeshShape& shape, int world_size) {
  std::vector<std::string> fits;
  for (size_t i = 0; i < shape.size(); ++i) {
    long long others = 1;
    for (size_t j = 0; j < shape.size(); ++j) {
      if (j != i) others *= shape[j].size;
    }
    if (world_size % others == 0) fits.push_back(fmt::format("{}_size to {}", shape[i].name, world_size / others));
  }
  if (fits.empty()) return fmt::format("choose sizes whose product is {}", world_size);
  return fmt::format("set {}, or one size to 0 (what the others leave)", fmt::join(fits, ", or "));
}

}  // namespace

MeshShape dp_pp_tp_shape(int dp, int pp, int tp) {
  if (dp < 0 || pp < 1 || tp < 1) {
    throw std::invalid_argument(fmt::format(
        "mesh sizes must be positive (dp may be 0 = inferred), got dp={} pp={} tp={}", dp, pp, tp));
  }
  return {{MeshAxis::kDp, dp}, {MeshAxis::kPp, pp}, {MeshAxis::kTp, tp}};
}

MeshLayout::MeshLayout(MeshShape shape, int world_size)
    : shape_(resolve(std::move(shape), world_size)), world_size_(world_size) {}

MeshShape MeshLayout::resolve(MeshShape shape, int world_size) {
  check_names(shape);
  int inferred = -1;
  std::vector<int> given;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i].size < 0) {
      throw std::invalid_argument(fmt::format(
          "mesh axis {} has size {}: sizes must be positive (one axis may be 0 = inferred), got {}", shape[i].name,
          shape[i].size, listed(shape)));
    }
    if (shape[i].size > 0) {
      given.push_back(static_cast<int>(i));
    } else if (inferred >= 0) {
      throw std::invalid_argument(fmt::format(
          "mesh axes {} and {} both have size 0 (inferred), got {}: give all sizes but one", shape[inferred].name,
          shape[i].name, listed(shape)));
    } else {
      inferred = static_cast<int>(i);
    }
  }
  long long product = 1;  // of sizes that may each be up to INT_MAX
  for (int i : given) product *= shape[i].size;
  if (inferred >= 0) {
    if (world_size % product != 0) {
      std::vector<int> divisors;
      for (int d = 1; d <= world_size; ++d) {
        if (world_size % d == 0) divisors.push_back(d);
      }
      const std::string factors =
          given.size() == 1 ? fmt::format("{}_size = {}", shape[given[0]].name, product)
                            : fmt::format("{} = {} = {}", joined_names(shape, given, "_size"),
                                          joined_sizes(shape, given), product);
      throw std::invalid_argument(fmt::format(
          "world size {} is not divisible by {}; choose sizes whose product divides {} ({}), and {} takes what "
          "they leave",
          world_size, factors, world_size, fmt::join(divisors, ", "), shape[inferred].name));
    }
    shape[inferred].size = static_cast<int>(world_size / product);
    return shape;
  }
  if (product != world_size) {
    std::vector<int> all(shape.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
    throw std::invalid_argument(fmt::format("{} = {} = {} ranks, but the job has {}; {}", joined_names(shape, all),
                                            joined_sizes(shape, all), product, world_size,
                                            sizes_that_fit(shape, world_size)));
  }
  return shape;
}

int MeshLayout::axis_index(std::string_view axis) const {
  for (size_t i = 0; i < shape_.size(); ++i) {
    if (shape_[i].name == axis) return static_cast<int>(i);
  }
  throw std::invalid_argument(
      fmt::format("the mesh ({}) has no axis '{}'; its axes are {}", describe(), axis, names_of(shape_)));
}

bool MeshLayout::has_axis(std::string_view axis) const {
  return std::any_of(shape_.begin(), shape_.end(), [&](const MeshAxis& a) { return a.name == axis; });
}

std::vector<int> MeshLayout::axis_indices(const MeshAxisSet& axes) const {
  if (axes.empty()) throw std::invalid_argument(fmt::format("a set of mesh axes names at least one of {}", names_of(shape_)));
  std::vector<int> indices;
  for (const auto& name : axes) {
    const int i = axis_index(name);
    if (std::find(indices.begin(), indices.end(), i) != indices.end()) {
      throw std::invalid_argument(fmt::format("mesh axis '{}' appears twice in the set {{{}}}", name, fmt::join(axes, ",")));
    }
    indices.push_back(i);
  }
  std::sort(indices.begin(), indices.end());
  return indices;
}

MeshCoordinate MeshLayout::coordinate_of(int rank) const {
  if (rank < 0 || rank >= world_size_) {
    throw std::out_of_range(fmt::format("rank {} is outside the mesh ({}, {} ranks)", rank, describe(), world_size_));
  }
  MeshCoordinate c(shape_.size());
  for (int a = static_cast<int>(shape_.size()) - 1; a >= 0; --a) {
    c[a] = rank % shape_[a].size;
    rank /= shape_[a].size;
  }
  return c;
}

int MeshLayout::rank_of(const MeshCoordinate& c) const {
  if (c.size() != shape_.size()) {
    throw std::invalid_argument(fmt::format("a coordinate of the mesh ({}) has {} indices, got {}", describe(),
                                            shape_.size(), c.size()));
  }
  int rank = 0;
  for (size_t a = 0; a < shape_.size(); ++a) {
    if (c[a] < 0 || c[a] >= shape_[a].size) {
      throw std::out_of_range(
          fmt::format("index {} on mesh axis {} is outside 0..{}", c[a], shape_[a].name, shape_[a].size - 1));
    }
    rank = rank * shape_[a].size + c[a];
  }
  return rank;
}

std::vector<int> MeshLayout::axis_ranks(std::string_view axis, int rank) const {
  return ranks_over({std::string(axis)}, rank);
}

std::vector<int> MeshLayout::ranks_over(const MeshAxisSet& axes, int rank) const {
  return ranks_through(axis_indices(axes), rank);
}

std::vector<int> MeshLayout::ranks_through(const std::vector<int>& indices, int rank) const {
  for (size_t k = 0; k < indices.size(); ++k) {
    if (indices[k] < 0 || indices[k] >= static_cast<int>(shape_.size()) || (k > 0 && indices[k] <= indices[k - 1])) {
      throw std::invalid_argument(fmt::format("axis positions [{}] of the mesh ({}) are not ascending positions 0..{}",
                                              fmt::join(indices, ","), describe(), shape_.size() - 1));
    }
  }
  // Count through the set's axes like an odometer, the innermost fastest: ranks come ascending.
  MeshCoordinate c = coordinate_of(rank);
  for (int a : indices) c[a] = 0;
  std::vector<int> ranks;
  while (true) {
    ranks.push_back(rank_of(c));
    int k = static_cast<int>(indices.size()) - 1;
    for (; k >= 0; --k) {
      const int a = indices[k];
      if (++c[a] < shape_[a].size) break;
      c[a] = 0;
    }
    if (k < 0) return ranks;
  }
}

std::string MeshLayout::describe() const { return listed(shape_); }

}  // namespace colo::dist
