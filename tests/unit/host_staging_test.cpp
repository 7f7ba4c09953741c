// HostStaging (core/src/dist/host_staging.h): what Gloo's send and recv get in the place of a
// tensor they cannot take. On the CPU build the tensors that need it are strided views; the CUDA
// tensors of COLO_BACKEND=gloo take the same path (tests/dist/process_group_test.cpp on a GPU).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "host_staging.h"

namespace colo::dist {
namespace {

TEST(HostStaging, LeavesContiguousHostTensorsAsTheyAre) {
  HostStaging staging;
  const auto out = torch::randn({3, 4});
  const auto in = torch::randn({5});
  EXPECT_TRUE(staging.outgoing(out).is_same(out));
  EXPECT_TRUE(staging.incoming(in).is_same(in));
  EXPECT_FALSE(staging.has_arrivals());
  EXPECT_FALSE(staging.completion()) << "nothing to copy: no completion step";
}

TEST(HostStaging, SendsACopyTakenWhenAsked) {
  HostStaging staging;
  auto base = torch::randn({4, 3});
  const auto view = base.t();  // strided: Gloo would refuse it
  ASSERT_FALSE(view.is_contiguous());
  const auto want = view.clone();
  const auto sent = staging.outgoing(view);
  EXPECT_TRUE(sent.is_cpu());
  EXPECT_TRUE(sent.is_contiguous());
  EXPECT_NE(sent.data_ptr(), base.data_ptr());
  EXPECT_TRUE(torch::equal(sent, want));
  base.add_(1.0);  // later changes do not reach what is being sent
  EXPECT_TRUE(torch::equal(sent, want));
  EXPECT_FALSE(staging.has_arrivals()) << "a send has nothing to copy back";
}

TEST(HostStaging, SendsNoAutogradHistory) {
  HostStaging staging;
  const auto leaf = torch::randn({3, 2}, torch::requires_grad());
  const auto sent = staging.outgoing(leaf.t());
  EXPECT_FALSE(sent.requires_grad());
  EXPECT_TRUE(torch::equal(sent, leaf.detach().t()));
}

// Received data reaches a strided destination only at finish() (Work::wait), and only its own
// elements: the rest of the tensor it is a view of stays as it was.
TEST(HostStaging, CopiesArrivalsIntoTheirTensorsOnCompletion) {
  HostStaging staging;
  auto whole = torch::randn({4, 6});
  const auto before = whole.clone();
  const auto first = whole.narrow(1, 1, 2);  // columns 1-2: strided
  const auto second = whole.narrow(1, 4, 2).t();
  const auto plain = torch::zeros({3});
  const auto buffer_a = staging.incoming(first);
  EXPECT_TRUE(staging.incoming(plain).is_same(plain));
  const auto buffer_b = staging.incoming(second);
  ASSERT_TRUE(staging.has_arrivals());
  for (const auto& buffer : {buffer_a, buffer_b}) {
    EXPECT_TRUE(buffer.is_cpu());
    EXPECT_TRUE(buffer.is_contiguous());
  }
  EXPECT_EQ(buffer_a.sizes(), first.sizes());
  EXPECT_EQ(buffer_b.sizes(), second.sizes());
  const auto a = torch::randn(first.sizes());
  const auto b = torch::randn(second.sizes());
  buffer_a.copy_(a);  // what the backend writes
  buffer_b.copy_(b);
  EXPECT_TRUE(torch::equal(whole, before)) << "nothing lands before completion";

  const auto complete = staging.completion();
  ASSERT_TRUE(complete);
  complete();
  EXPECT_TRUE(torch::equal(whole.narrow(1, 1, 2), a));
  EXPECT_TRUE(torch::equal(whole.narrow(1, 4, 2), b.t()));
  for (const int64_t untouched : {0, 3}) {
    EXPECT_TRUE(torch::equal(whole.select(1, untouched), before.select(1, untouched))) << "column " << untouched;
  }
}

}  // namespace
}  // namespace colo::dist
