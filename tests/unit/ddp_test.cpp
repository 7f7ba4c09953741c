// core/ddp on one process: bucket assignment, and the BucketedAllReduce's bookkeeping (hooks,
// bucket views, no_sync, unused parameters) in a world of one, where the average of the
// gradients is the gradients themselves. The multi-rank arithmetic is in tests/dist/torch_ddp_test.cpp.
#include <colo/ddp/broadcast_coalesced.h>
#include <colo/ddp/bucket_assignment.h>
#include <colo/ddp/bucketed_all_reduce.h>
#include <colo/ddp/grad_bucket_scheduler.h>
#include <colo/dist/environment.h>
#include <colo/dist/process_group.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <colo/files/files.h>
#include <string>

namespace colo::ddp {
namespace {

using Buckets = std::vector<std::vector<std::size_t>>;

TEST(AssignBuckets, ReverseOrderUpToTheCap) {
  // Four fp32 parameters of 16 bytes each.
  std::vector<torch::Tensor> params(4, torch::zeros({4}));
  EXPECT_EQ(assign_buckets(params, 32), (Buckets{{3, 2}, {1, 0}}));
  EXPECT_EQ(assign_buckets(params, 33), (Buckets{{3, 2, 1}, {0}}));
  EXPECT_EQ(assign_buckets(params, 1), (Buckets{{3}, {2}, {1}, {0}}));
  EXPECT_EQ(assign_buckets(params, 1 << 20), (Buckets{{3, 2, 1, 0}}));
}

TEST(AssignBuckets, ParameterLargerThanTheCapGetsItsOwnBucket) {
  std::vector<torch::Tensor> params{torch::zeros({2}), torch::zeros({100}), torch::zeros({2}), torch::zeros({2})};
  // Visit 3, 2 (16 bytes: below 20), then 1 closes the bucket with 416 bytes; 0 is alone.
  EXPECT_EQ(assign_buckets(params, 20), (Buckets{{3, 2, 1}, {0}}));
  EXPECT_EQ(assign_buckets(params, 8), (Buckets{{3}, {2}, {1}, {0}}));
}

TEST(AssignBuckets, OneDtypePerBucketOrderedByFirstVisit) {
  std::vector<torch::Tensor> params{torch::zeros({4}), torch::zeros({4}, torch::kBFloat16), torch::zeros({4}),
                                    torch::zeros({4}, torch::kBFloat16)};
  // Reverse walk: 3 (bf16) opens the bf16 bucket first, then 2 opens the fp32 one.
  EXPECT_EQ(assign_buckets(params, 1 << 20), (Buckets{{3, 1}, {2, 0}}));
  // bf16 params are 8 bytes: 3 and 1 fill an 16-byte bucket; fp32 2 alone fills it.
  EXPECT_EQ(assign_buckets(params, 16), (Buckets{{3, 1}, {2}, {0}}));
}

TEST(AssignBuckets, RejectsBadInput) {
  EXPECT_THROW(assign_buckets({torch::zeros({1})}, 0), std::invalid_argument);
  EXPECT_THROW(assign_buckets({torch::Tensor()}, 10), std::invalid_argument);
  EXPECT_TRUE(assign_buckets({}, 10).empty());
}

std::shared_ptr<dist::ProcessGroup> world_of_one() {
  const auto path = colo::files::join(colo::files::temp_directory(), "colo_ddp_unit_store_" + std::to_string(::getpid()) + "_" + std::to_string(std::rand()));
  dist::Environment env;
  env.rdzv_file = path;
  dist::ProcessGroup::Options options;
  options.timeout = std::chrono::seconds(10);
  return dist::init_world(env, options);
}

// A small MLP whose second linear can be left out of forward.
struct TwoLayers : torch::nn::Module {
  TwoLayers() {
    fc1 = register_module("fc1", torch::nn::Linear(6, 5));
    fc2 = register_module("fc2", torch::nn::Linear(5, 3));
    skip = register_module("skip", torch::nn::Linear(6, 3));
  }
  torch::Tensor forward(const torch::Tensor& x, bool use_skip) {
    auto y = fc2(torch::tanh(fc1(x)));
    return use_skip ? y + skip(x) : y;
  }
  std::vector<std::pair<std::string, torch::Tensor>> named() {
    std::vector<std::pair<std::string, torch::Tensor>> out;
    for (const auto& item : named_parameters()) out.emplace_back(item.key(), item.value());
    return out;
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, skip{nullptr};
};

class BucketedAllReduceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { world_ = world_of_one(); }
  static void TearDownTestSuite() { world_.reset(); }

  // Identical twins: one to reduce, one as the reference.
  void SetUp() override {
    torch::manual_seed(3);
    model_ = std::make_shared<TwoLayers>();
    torch::manual_seed(3);
    reference_ = std::make_shared<TwoLayers>();
    x_ = torch::randn({4, 6});
  }

  void backward(TwoLayers& m, bool use_skip = true, double factor = 1.0) {
    (m.forward(x_, use_skip).pow(2).mean() * factor).backward();
  }

  void expect_grads_equal() {
    const auto got = model_->named_parameters();
    const auto want = reference_->named_parameters();
    for (const auto& item : want) {
      const auto& g = got[item.key()].grad();
      const auto& r = item.value().grad();
      ASSERT_EQ(g.defined(), r.defined()) << item.key();
      if (r.defined()) {
        EXPECT_TRUE(torch::allclose(g, r, 1e-6, 1e-7)) << item.key();
      }
    }
  }

  static std::shared_ptr<dist::ProcessGroup> world_;
  std::shared_ptr<TwoLayers> model_, reference_;
  torch::Tensor x_;
};
std::shared_ptr<dist::ProcessGroup> BucketedAllReduceTest::world_;

TEST_F(BucketedAllReduceTest, GradientsAreViewsIntoTheBuckets) {
  BucketedAllReduce reducer(model_->named(), world_, BucketedAllReduceOptions().bucket_cap_mb(64.0 / (1 << 20)));
  ASSERT_GT(reducer.num_buckets(), 1u);
  EXPECT_EQ(reducer.param_names().size(), 6u);
  // Launch order: the last registered parameter (skip.bias) is in the first bucket.
  EXPECT_EQ(reducer.bucket_assignment().front().front(), 5u);
  for (std::size_t b = 0; b < reducer.num_buckets(); ++b) {
    const auto& buffer = reducer.bucket_buffer(b);
    const auto* begin = static_cast<const char*>(buffer.data_ptr());
    const auto* end = begin + buffer.numel() * buffer.element_size();
    for (auto i : reducer.bucket_assignment()[b]) {
      const auto* grad = static_cast<const char*>(reducer.params()[i].grad().data_ptr());
      EXPECT_TRUE(grad >= begin && grad < end) << reducer.param_names()[i];
    }
  }
  backward(*model_);
  backward(*reference_);
  expect_grads_equal();
  EXPECT_EQ(reducer.synchronized_passes(), 1);
  for (std::size_t i = 0; i < reducer.params().size(); ++i) {
    EXPECT_TRUE(reducer.params()[i].grad().data_ptr() != nullptr);
  }

  // zero_grad drops the gradients; the next pass gathers autograd's fresh ones into the same
  // views, and a gradient accumulated in place into its view (no zero_grad) is reduced as it is.
  const auto* view = reducer.params()[0].grad().data_ptr();
  reducer.zero_grad();
  for (const auto& p : reducer.params()) EXPECT_FALSE(p.grad().defined());
  reference_->zero_grad();
  backward(*model_);
  backward(*reference_);
  expect_grads_equal();
  EXPECT_EQ(reducer.params()[0].grad().data_ptr(), view);
  backward(*model_);
  backward(*reference_);
  expect_grads_equal();
  EXPECT_EQ(reducer.synchronized_passes(), 3);
}

TEST_F(BucketedAllReduceTest, CopyModeKeepsGradientsOutsideTheBuckets) {
  BucketedAllReduce reducer(model_->named(), world_, BucketedAllReduceOptions().gradient_as_bucket_view(false));
  EXPECT_EQ(reducer.num_buckets(), 1u);
  EXPECT_FALSE(model_->fc1->weight.grad().defined());
  backward(*model_);
  backward(*reference_);
  expect_grads_equal();
  const auto& buffer = reducer.bucket_buffer(0);
  EXPECT_NE(model_->fc1->weight.grad().data_ptr(), buffer.data_ptr());
}

TEST_F(BucketedAllReduceTest, NoSyncAccumulatesAndTheNextPassReducesTheSum) {
  for (bool view : {true, false}) {
    SetUp();
    BucketedAllReduce reducer(model_->named(), world_, BucketedAllReduceOptions().gradient_as_bucket_view(view));
    reducer.set_sync(false);
    EXPECT_FALSE(reducer.sync_enabled());
    backward(*model_, true, 0.5);
    backward(*model_, true, 0.25);
    EXPECT_EQ(reducer.synchronized_passes(), 0);
    reducer.set_sync(true);
    backward(*model_, true, 0.25);
    EXPECT_EQ(reducer.synchronized_passes(), 1);
    backward(*reference_);
    expect_grads_equal();
  }
}

TEST_F(BucketedAllReduceTest, UnusedParameterIsAnErrorNamingItAndTheOption) {
  BucketedAllReduce reducer(model_->named(), world_);
  try {
    backward(*model_, /*use_skip=*/false);
    FAIL() << "expected an error for the unused parameters";
  } catch (const std::exception& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("skip.weight"), std::string::npos) << message;
    EXPECT_NE(message.find("skip.bias"), std::string::npos) << message;
    EXPECT_NE(message.find("find_unused_parameters=true"), std::string::npos) << message;
    EXPECT_EQ(message.find("fc1.weight"), std::string::npos) << message;
  }
  // The failed pass left no state behind: a full pass synchronises normally.
  reducer.zero_grad();
  backward(*model_);
  EXPECT_EQ(reducer.synchronized_passes(), 1);
  backward(*reference_);
  expect_grads_equal();
}

TEST_F(BucketedAllReduceTest, FindUnusedParameters) {
  for (bool view : {true, false}) {
    SetUp();
    BucketedAllReduce reducer(model_->named(), world_,
                              BucketedAllReduceOptions().find_unused_parameters(true).gradient_as_bucket_view(view));
    backward(*model_, /*use_skip=*/false);
    backward(*reference_, /*use_skip=*/false);
    EXPECT_EQ(reducer.synchronized_passes(), 1);
    if (view) {
      // As in PyTorch's DDP: a bucket view is always a defined (here zero) gradient.
      EXPECT_EQ(model_->skip->weight.grad().abs().sum().item<float>(), 0.0f);
      reference_->skip->weight.mutable_grad() = torch::zeros_like(reference_->skip->weight);
      reference_->skip->bias.mutable_grad() = torch::zeros_like(reference_->skip->bias);
    }
    expect_grads_equal();  // without views: undefined on both sides
  }
}

TEST_F(BucketedAllReduceTest, GradientSetToUndefinedReturnsIntoItsBucket) {
  BucketedAllReduce reducer(model_->named(), world_);
  const auto* view = model_->fc2->weight.grad().data_ptr();
  for (auto& p : model_->parameters()) p.mutable_grad() = torch::Tensor();  // Optimizer::zero_grad(set_to_none)
  backward(*model_);
  backward(*reference_);
  expect_grads_equal();
  EXPECT_EQ(model_->fc2->weight.grad().data_ptr(), view);
}

TEST_F(BucketedAllReduceTest, PrepareForBackwardRecoversFromAFailedPass) {
  BucketedAllReduce reducer(model_->named(), world_, BucketedAllReduceOptions().bucket_cap_mb(64.0 / (1 << 20)));
  // A hook between fc2 and fc1 throws: fc2's and skip's gradients are in, fc1's never come.
  auto hidden = torch::tanh(model_->fc1(x_));
  hidden.register_hook([](torch::Tensor) -> torch::Tensor { throw std::runtime_error("boom"); });
  auto loss = (model_->fc2(hidden) + model_->skip(x_)).pow(2).mean();
  EXPECT_THROW(loss.backward(), std::exception);
  EXPECT_EQ(reducer.synchronized_passes(), 0);

  reducer.prepare_for_backward();
  reducer.zero_grad();
  backward(*model_);
  EXPECT_EQ(reducer.synchronized_passes(), 1);
  backward(*reference_);
  expect_grads_equal();
}

TEST_F(BucketedAllReduceTest, HooksGoAwayWithTheReducer) {
  {
    BucketedAllReduce reducer(model_->named(), world_);
    backward(*model_);
    EXPECT_EQ(reducer.synchronized_passes(), 1);
  }
  model_->zero_grad();
  // Unused parameters would be an error if the hooks were still there.
  backward(*model_, /*use_skip=*/false);
  backward(*reference_, /*use_skip=*/false);
  EXPECT_TRUE(torch::allclose(model_->fc1->weight.grad(), reference_->fc1->weight.grad()));
}

TEST_F(BucketedAllReduceTest, SkipsFrozenParametersAndRejectsBadOptions) {
  model_->fc1->weight.set_requires_grad(false);
  BucketedAllReduce reducer(model_->named(), world_);
  EXPECT_EQ(reducer.params().size(), 5u);
  EXPECT_THROW(BucketedAllReduce(model_->named(), world_, BucketedAllReduceOptions().bucket_cap_mb(0)),
               std::invalid_argument);
  EXPECT_THROW(BucketedAllReduce(model_->named(), nullptr), std::invalid_argument);
}

TEST_F(BucketedAllReduceTest, BroadcastInAWorldOfOneChangesNothing) {
  auto t = torch::arange(6.0);
  broadcast_coalesced(*world_, {t}, 0);
  EXPECT_TRUE(torch::equal(t, torch::arange(6.0)));
}

// Overlap: with launch_during_backward a bucket's collective starts as soon as its last gradient
// is in, while autograd still computes the gradients of earlier layers; without it, nothing
// starts before the pass has ended.
TEST(GradBucketScheduler, LaunchesDuringBackwardOnlyWhenAskedTo) {
  for (const bool during : {true, false}) {
    torch::manual_seed(3);
    TwoLayers model;
    std::vector<torch::Tensor> params;
    std::vector<std::string> names;
    for (const auto& [name, param] : model.named()) {
      params.push_back(param);
      names.push_back(name);
    }
    ASSERT_EQ(names, (std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "skip.weight",
                                               "skip.bias"}));
    // Bucket 0: the layers next to the output, whose gradients come first; bucket 1: fc1.
    const std::vector<std::vector<std::size_t>> buckets{{2, 3, 4, 5}, {0, 1}};
    std::vector<std::string> events;
    std::unique_ptr<GradBucketScheduler> scheduler;
    GradBucketCallbacks callbacks;
    callbacks.grad_ready = [&](std::size_t i) { events.push_back(names[i]); };
    callbacks.launch = [&](std::size_t b) { events.push_back("launch " + std::to_string(b)); };
    callbacks.finish = [&](const std::vector<std::size_t>& missing) {
      EXPECT_TRUE(missing.empty());
      events.push_back("end of pass");
      scheduler->launch_remaining();
    };
    scheduler = std::make_unique<GradBucketScheduler>(params, names, buckets, callbacks, during);
    model.forward(torch::randn({4, 6}), /*use_skip=*/true).pow(2).mean().backward();

    auto at = [&events](const std::string& event) {
      return std::find(events.begin(), events.end(), event) - events.begin();
    };
    ASSERT_EQ(events.size(), 9u) << "six gradients, two launches, one end of pass";
    EXPECT_LT(at("launch 0"), at("launch 1"));
    if (during) {
      EXPECT_LT(at("launch 0"), std::min(at("fc1.weight"), at("fc1.bias"))) << "bucket 0 waited for fc1";
      EXPECT_LT(at("launch 1"), at("end of pass"));
    } else {
      EXPECT_EQ(at("launch 0"), at("end of pass") + 1) << "a launch before the end of the pass";
    }
    EXPECT_EQ(scheduler->synchronized_passes(), 1);
  }
}

}  // namespace
}  // namespace colo::ddp
