// CUDA_DEVICE_MAX_CONNECTIONS for nvJPEG (issue 38; colo/data/cuda_work_queues.h): colo sets it
// only where it is unset and can still take effect, never overrides a user's value, and says what
// to change wherever nvJPEG would stall behind training.
#include <colo/data/cuda_work_queues.h>
#include <colo/data/image_folder.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

namespace colo::data {
namespace {

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "expected \"" << (part) << "\" in: " << (text)

TEST(CudaWorkQueues, UnsetBeforeCudaStartsIsSetToThirtyTwo) {
  const auto plan = plan_work_queues(std::nullopt, false);
  EXPECT_TRUE(plan.set_variable);
  EXPECT_EQ(plan.queues, kNvjpegWorkQueues);
  EXPECT_TRUE(plan.advice.empty()) << plan.advice;
}

TEST(CudaWorkQueues, UnsetAfterCudaStartedIsAdvisedNotSet) {
  const auto plan = plan_work_queues(std::nullopt, true);
  EXPECT_FALSE(plan.set_variable);
  EXPECT_EQ(plan.queues, kDefaultWorkQueues);
  EXPECT_CONTAINS(plan.advice, "CUDA_DEVICE_MAX_CONNECTIONS=32");
  EXPECT_CONTAINS(plan.advice, "CUDA was initialised in this process before colo could set it");
  EXPECT_CONTAINS(plan.advice, "before the process starts");
}

TEST(CudaWorkQueues, AUserValueIsKeptAndAdvisedAgainstBelowThirtyTwo) {
  for (const bool initialised : {false, true}) {
    const auto low = plan_work_queues(std::string("31"), initialised);
    EXPECT_FALSE(low.set_variable);
    EXPECT_EQ(low.queues, 31);
    EXPECT_CONTAINS(low.advice, "CUDA_DEVICE_MAX_CONNECTIONS=31 (set outside colo, kept)");
    const auto one = plan_work_queues(std::string("1"), initialised);  // Megatron's setting
    EXPECT_EQ(one.queues, 1);
    EXPECT_FALSE(one.advice.empty());
    const auto enough = plan_work_queues(std::string("32"), initialised);
    EXPECT_FALSE(enough.set_variable);
    EXPECT_EQ(enough.queues, 32);
    EXPECT_TRUE(enough.advice.empty()) << enough.advice;
  }
}

TEST(CudaWorkQueues, ANonNumberIsNamed) {
  for (const char* bad : {"abc", "32abc", "0", "-4"}) {
    const auto plan = plan_work_queues(std::string(bad), false);
    EXPECT_FALSE(plan.set_variable) << bad;
    EXPECT_EQ(plan.queues, kDefaultWorkQueues) << bad;
    EXPECT_CONTAINS(plan.advice, std::string("CUDA_DEVICE_MAX_CONNECTIONS='") + bad + "' is not a positive number");
  }
}

// Without nvJPEG nothing needs the queues: the process's environment is left alone.
TEST(CudaWorkQueues, ABuildWithoutNvjpegChangesNothing) {
  if (nvjpeg_compiled()) GTEST_SKIP() << "this build has nvJPEG (tests/gpu covers it)";
  unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
  const auto plan = widen_work_queues_for_nvjpeg();
  EXPECT_TRUE(plan.advice.empty());
  EXPECT_EQ(std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"), nullptr);
}

}  // namespace
}  // namespace colo::data
