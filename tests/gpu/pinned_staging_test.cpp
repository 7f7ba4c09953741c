// zero::PinnedStaging and compat::CopyStream on a GPU: downloads reach their callbacks with the
// values the compute stream produced (also when the slots run out and transfers wait for them),
// uploads land before the current stream reads them, and a callback's failure reaches finish().
#include <colo/compat/copy_stream.h>
#include <colo/zero/pinned_staging.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <atomic>
#include <stdexcept>
#include <vector>

namespace colo::zero {
namespace {

const torch::Device kGpu(torch::kCUDA, 0);

TEST(PinnedStaging, DownloadsArriveInOrderWithTheComputedValuesThroughFewSlots) {
  PinnedStaging staging(kGpu, PinnedStagingOptions().slot_bytes(1 << 22).slots(2));
  std::vector<torch::Tensor> received(8);
  std::vector<torch::Tensor> sent;
  for (int i = 0; i < 8; ++i) {
    // Produced by a chain of kernels on the compute stream just before the download is queued.
    auto values = torch::arange(1 << 20, torch::TensorOptions(kGpu).dtype(torch::kFloat)).mul_(i + 1).sin_();
    sent.push_back(values.cpu());
    staging.download(values, [&received, i](const torch::Tensor& host) { received[i] = host.clone(); });
  }
  staging.finish();
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(received[i].defined()) << i;
    EXPECT_TRUE(torch::equal(received[i], sent[i])) << i;
  }
  EXPECT_LE(staging.staging_bytes(), 2 * (1 << 22));
}

TEST(PinnedStaging, UploadsLandBeforeTheCurrentStreamReadsThem) {
  PinnedStaging staging(kGpu, PinnedStagingOptions().slot_bytes(1 << 21).slots(2));
  std::vector<torch::Tensor> targets;
  for (int i = 0; i < 6; ++i) {
    targets.push_back(torch::zeros({1 << 20}, torch::TensorOptions(kGpu).dtype(torch::kBFloat16)));
    const auto master = torch::full({1 << 20}, 0.5 + i, torch::kFloat);
    staging.upload(targets.back(), [&master](const torch::Tensor& host) { host.copy_(master); });
  }
  staging.finish();  // the current stream waits for the uploads: what it computes next sees them
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(targets[i].to(torch::kFloat).sum().item<double>(), (0.5 + i) * (1 << 20)) << i;
  }
}

TEST(PinnedStaging, ACallbacksFailureReachesFinish) {
  PinnedStaging staging(kGpu, PinnedStagingOptions().slot_bytes(1 << 12).slots(1));
  staging.download(torch::ones({16}, kGpu), [](const torch::Tensor&) { throw std::runtime_error("add failed"); });
  EXPECT_THROW(staging.finish(), std::runtime_error);
  // And the pool goes on working.
  std::atomic<bool> ran{false};
  staging.download(torch::ones({16}, kGpu), [&ran](const torch::Tensor&) { ran = true; });
  staging.finish();
  EXPECT_TRUE(ran);
}

TEST(CopyStream, CopiesAfterTheWorkQueuedBeforeThem) {
  compat::CopyStream copies(kGpu);
  auto a = torch::zeros({1 << 22}, kGpu);
  for (int i = 0; i < 20; ++i) a.add_(1.0);  // queued on the compute stream
  auto host = torch::empty({1 << 22}, torch::TensorOptions().pinned_memory(true));
  copies.copy(host, a).wait();
  EXPECT_EQ(host.sum().item<double>(), 20.0 * (1 << 22));
}

}  // namespace
}  // namespace colo::zero
