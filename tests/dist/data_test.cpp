// Data sharding across real ranks: every rank computes its own shard, the shards are gathered,
// and every rank checks that together they partition the data set (up to the padding), and
// that the loaders' batch k together are the single-process batch k.
#include <colo/data/data_loader.h>
#include <colo/data/distributed_sampler.h>
#include <colo/data/in_memory_dataset.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <vector>

#include "dist_test_env.h"

namespace colo::data {
namespace {

using test::world;

// Every rank's tensor, concatenated in rank order (all ranks pass the same shape).
torch::Tensor gather(const torch::Tensor& local) {
  auto group = world();
  auto all = torch::empty({group->size() * local.size(0)}, local.options().device(test::device()));
  group->all_gather(all, local.contiguous().to(test::device())).wait();
  return all.cpu();
}

torch::Tensor as_tensor(const std::vector<int64_t>& values) { return torch::tensor(values, torch::kLong); }

TEST(DataDistTest, SamplerShardsPartitionTheDataSet) {
  const int64_t replicas = world()->size();
  const int64_t rank = world()->rank();
  for (const int64_t n : {37, 64, 3}) {
    for (const bool drop_last : {false, true}) {
      if (drop_last && n < replicas) continue;
      for (const int64_t epoch : {0, 5}) {
        DistributedSampler sampler(n, replicas, rank, /*shuffle=*/true, /*seed=*/42, drop_last);
        sampler.set_epoch(epoch);
        const auto local = sampler.indices();
        const auto all = gather(as_tensor(local));
        const std::string where = "n=" + std::to_string(n) + " epoch=" + std::to_string(epoch) +
                                  (drop_last ? " drop_last" : " padded") + " on rank " + std::to_string(rank);

        // Every rank sees the same global order: what it computes for rank r is what rank r has.
        for (int64_t r = 0; r < replicas; ++r) {
          DistributedSampler other(n, replicas, r, true, 42, drop_last);
          other.set_epoch(epoch);
          EXPECT_TRUE(
              torch::equal(all.narrow(0, r * sampler.num_samples(), sampler.num_samples()), as_tensor(other.indices())))
              << where << ": shard of rank " << r;
        }
        const auto counts = torch::bincount(all, /*weights=*/{}, n);
        ASSERT_EQ(counts.size(0), n) << where;
        if (drop_last) {
          EXPECT_EQ(all.size(0), n / replicas * replicas) << where;
          EXPECT_LE(counts.max().item<int64_t>(), 1) << where << ": shards overlap";
        } else {
          EXPECT_EQ(all.size(0), (n + replicas - 1) / replicas * replicas) << where;
          EXPECT_GE(counts.min().item<int64_t>(), n >= replicas ? 1 : replicas / n) << where << ": a sample is missing";
          // Padding (fewer than `replicas` samples) repeats each sample at most once.
          if (n >= replicas) {
            EXPECT_LE(counts.max().item<int64_t>(), 2) << where;
          }
        }
      }
    }
  }
}

// With drop_last, the ranks' batch k together hold exactly single-process batch k at the global
// batch size: data-parallel training sees the same samples per step as one process.
TEST(DataDistTest, LoaderBatchesTogetherAreTheSingleProcessBatch) {
  const int64_t replicas = world()->size();
  const int64_t n = 90;
  auto images = torch::arange(n).to(torch::kUInt8).view({n, 1, 1, 1}).expand({n, 1, 2, 2}).contiguous();
  auto data =
      std::make_shared<InMemoryDataset>(images, torch::arange(n) % 10, 10, "index", Normalization{{0.0}, {1.0}});
  const auto options = DataLoaderOptions(4).shuffle(true).seed(11).drop_last(true).normalize(false);
  DataLoader loader(data, DataLoaderOptions(options).num_replicas(replicas).rank(world()->rank()));
  DataLoader single(data, DataLoaderOptions(options).batch_size(4 * replicas));
  loader.set_epoch(2);
  single.set_epoch(2);
  ASSERT_EQ(loader.num_batches(), single.num_batches());
  while (auto batch = loader.next()) {
    const auto ids = (batch->images.flatten(1).select(1, 0) * 255.0).round().to(torch::kLong);
    auto together = std::get<0>(gather(ids).sort());
    const auto expected = single.next();
    ASSERT_TRUE(expected.has_value());
    const auto expected_ids =
        std::get<0>((expected->images.flatten(1).select(1, 0) * 255.0).round().to(torch::kLong).sort());
    EXPECT_TRUE(torch::equal(together, expected_ids)) << "batch " << loader.state().next_batch - 1;
  }
  EXPECT_FALSE(single.next().has_value());
}

}  // namespace
}  // namespace colo::data
