#include <colo/nn/shard_spec.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <cstddef>
#include <stdexcept>
#include <string>

namespace colo::nn {

int64_t ShardSpec::local_size(int64_t full_size) const {
  if (parts < 1 || shards < 1 || index < 0 || index >= shards || full_size % (parts * shards) != 0) {
    throw std::invalid_argument(fmt::format("a dimension of {} does not split as {}: it needs a multiple of parts x "
                                            "shards = {}",
                                            full_size, describe(), parts * shards));
  }
  return full_size / shards;
}

std::string ShardSpec::describe() const {
  return fmt::format("dim {}, {} part{}, shard {} of {}", dim, parts, parts == 1 ? "" : "s", index, shards);
}

torch::Tensor shard_of(const torch::Tensor& full, const ShardSpec& spec) {
  if (spec.dim < 0 || spec.dim >= full.dim()) {
    throw std::invalid_argument(fmt::format("shard_of: a {}-dimensional tensor has no dim {} ({})", full.dim(), spec.dim,
                                            spec.describe()));
  }
  const int64_t local = spec.local_size(full.size(spec.dim));
  const int64_t part_size = full.size(spec.dim) / spec.parts;
  const int64_t piece = local / spec.parts;
  if (spec.parts == 1) return full.narrow(spec.dim, spec.index * piece, piece);
  std::vector<torch::Tensor> pieces;
  for (int64_t p = 0; p < spec.parts; ++p) pieces.push_back(full.narrow(spec.dim, p * part_size + spec.index * piece, piece));
  return torch::cat(pieces, spec.dim);
}

torch::Tensor unshard(const std::vector<torch::Tensor>& pieces, const ShardSpec& spec) {
  if (static_cast<int64_t>(pieces.size()) != spec.shards) {
    throw std::invalid_argument(
        fmt::format("unshard: {} pieces for {} shards ({})", pieces.size(), spec.shards, spec.describe()));
  }
  // Piece r is [part 0's shard r; part 1's shard r; ...]: regroup by part.
  std::vector<torch::Tensor> ordered;
  for (int64_t p = 0; p < spec.parts; ++p) {
    for (const auto& piece : pieces) {
      const int64_t size = piece.size(spec.dim) / spec.parts;
      ordered.push_back(piece.narrow(spec.dim, p * size, size));
    }
  }
  return torch::cat(ordered, spec.dim);
}

torch::Tensor shard_of(const torch::Tensor& full, const std::vector<ShardSpec>& cuts) {
  auto piece = full;
  for (const auto& cut : cuts) piece = shard_of(piece, cut);
  return piece;
}

int64_t pieces_of(const std::vector<ShardSpec>& cuts) {
  int64_t count = 1;
  for (const auto& cut : cuts) count *= cut.shards;
  return count;
}

torch::Tensor unshard(const std::vector<torch::Tensor>& pieces, const std::vector<ShardSpec>& cuts) {
  const int64_t count = pieces_of(cuts);
  if (static_cast<int64_t>(pieces.size()) != count) {
    std::vector<std::string> described;
    for (const auto& cut : cuts) described.push_back(cut.describe());
    throw std::invalid_argument(fmt::format("unshard: {} pieces for {} cuts that make {} ({})", pieces.size(),
                                            cuts.size(), count, fmt::join(described, "; then ")));
  }
  // Undo the last cut first: its index is the fastest, so each run of `shards` consecutive pieces
  // is one piece of the cut before it.
  auto level = pieces;
  for (auto cut = cuts.rbegin(); cut != cuts.rend(); ++cut) {
    std::vector<torch::Tensor> joined;
    for (size_t first = 0; first < level.size(); first += static_cast<size_t>(cut->shards)) {
      joined.push_back(unshard(std::vector<torch::Tensor>(level.begin() + static_cast<std::ptrdiff_t>(first),
                                                          level.begin() + static_cast<std::ptrdiff_t>(first) + cut->shards),
                               *cut));
    }
    level = std::move(joined);
  }
  return level.front();
}

}  // namespace colo::nn
