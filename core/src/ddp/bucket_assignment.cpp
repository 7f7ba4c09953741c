#include <colo/ddp/bucket_assignment.h>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>

namespace colo::ddp {

std::vector<std::vector<std::size_t>> assign_buckets(const std::vector<torch::Tensor>& params,
                                                     int64_t bucket_cap_bytes) {
  if (bucket_cap_bytes <= 0) {
    throw std::invalid_argument(fmt::format(
        "assign_buckets: the bucket capacity must be > 0 bytes, got {}; raise bucket_cap_mb", bucket_cap_bytes));
  }
  struct Open {
    std::vector<std::size_t> params;
    int64_t bytes = 0;
    std::size_t first_visit = 0;
  };
  // One open bucket per (dtype, device); a closed bucket remembers when its first parameter was
  // visited, which fixes its launch position.
  std::map<std::pair<int, std::string>, Open> open;
  std::vector<std::pair<std::size_t, std::vector<std::size_t>>> closed;
  std::size_t visit = 0;
  for (std::size_t k = params.size(); k-- > 0; ++visit) {
    const auto& p = params[k];
    if (!p.defined()) throw std::invalid_argument(fmt::format("assign_buckets: parameter {} is undefined", k));
    auto& bucket = open[{static_cast<int>(p.scalar_type()), p.device().str()}];
    if (bucket.params.empty()) bucket.first_visit = visit;
    bucket.params.push_back(k);
    bucket.bytes += p.numel() * static_cast<int64_t>(p.element_size());
    if (bucket.bytes >= bucket_cap_bytes) {
      closed.emplace_back(bucket.first_visit, std::move(bucket.params));
      bucket = Open{};
    }
  }
  for (auto& [key, bucket] : open) {
    if (!bucket.params.empty()) closed.emplace_back(bucket.first_visit, std::move(bucket.params));
  }
  std::sort(closed.begin(), closed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::vector<std::size_t>> buckets;
  buckets.reserve(closed.size());
  for (auto& entry : closed) buckets.push_back(std::move(entry.second));
  return buckets;
}

std::vector<std::vector<std::size_t>> assign_buckets(const std::vector<int64_t>& numels, int64_t element_size,
                                                     int64_t bucket_cap_bytes) {
  if (bucket_cap_bytes <= 0) {
    throw std::invalid_argument(fmt::format(
        "assign_buckets: the bucket capacity must be > 0 bytes, got {}; raise bucket_cap_mb", bucket_cap_bytes));
  }
  // One dtype and device: one open bucket, closed in the order of the walk.
  std::vector<std::vector<std::size_t>> buckets;
  std::vector<std::size_t> open;
  int64_t bytes = 0;
  for (std::size_t k = numels.size(); k-- > 0;) {
    open.push_back(k);
    bytes += numels[k] * element_size;
    if (bytes >= bucket_cap_bytes) {
      buckets.push_back(std::move(open));
      open.clear();
      bytes = 0;
    }
  }
  if (!open.empty()) buckets.push_back(std::move(open));
  return buckets;
}

}  // namespace colo::ddp
