// COLO_BACKEND (colo/dist/backend_choice.h): its parsing, what each request gives on each kind of
// machine, and that the process's own device and world follow it.
#include <colo/dist/backend_choice.h>
#include <colo/dist/device.h>
#include <colo/dist/environment.h>
#include <colo/dist/process_group.h>
#include <colo/files/files.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <map>
#include <string>

#include "scoped_env.h"

namespace colo::dist {
namespace {

std::optional<Backend> parse(const std::optional<std::string>& value) {
  return requested_backend([&](const char* name) -> const char* {
    EXPECT_STREQ(name, "COLO_BACKEND");
    return value ? value->c_str() : nullptr;
  });
}

// The message of the std::invalid_argument that `f` throws ("" when it throws none).
template <typename F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(BackendChoice, ReadsTheTwoNamesAndTakesEmptyAsUnset) {
  EXPECT_EQ(parse(std::nullopt), std::nullopt);
  EXPECT_EQ(parse(""), std::nullopt);
  EXPECT_EQ(parse("gloo"), Backend::kGloo);
  EXPECT_EQ(parse("nccl"), Backend::kNccl);
}

TEST(BackendChoice, RefusesAnythingButAWholeNameSayingWhatItTakes) {
  for (const std::string bad : {"GLOO", "Nccl", "gloo ", " nccl", "glo", "gloo,nccl", "mpi", "0"}) {
    const auto what = refusal([&] { parse(bad); });
    EXPECT_NE(what.find("COLO_BACKEND='" + bad + "'"), std::string::npos) << what;
    EXPECT_NE(what.find("gloo or nccl"), std::string::npos) << what;
  }
}

BackendSupport support(bool cuda, bool nccl, bool gloo) {
  BackendSupport s;
  s.cuda = cuda;
  s.nccl = nccl;
  s.gloo = gloo;
  return s;
}

TEST(BackendChoice, DefaultIsNcclWithGpusElseGlooAndNeverSharesAGpu) {
  struct Case {
    BackendSupport support;
    Backend want;
  };
  for (const auto& c : {Case{support(true, true, true), Backend::kNccl}, Case{support(true, true, false), Backend::kNccl},
                        Case{support(false, true, true), Backend::kGloo}, Case{support(true, false, true), Backend::kGloo},
                        Case{support(false, false, true), Backend::kGloo}}) {
    const auto choice = choose_backend(std::nullopt, c.support);
    EXPECT_EQ(choice.backend, c.want);
    EXPECT_FALSE(choice.share_first_gpu) << "GPU 0 is shared only when COLO_BACKEND=gloo asks for it";
  }
}

TEST(BackendChoice, GlooSharesTheFirstGpuWhereThereAreGpusOnly) {
  auto on_gpus = choose_backend(Backend::kGloo, support(true, true, true));
  EXPECT_EQ(on_gpus.backend, Backend::kGloo);
  EXPECT_TRUE(on_gpus.share_first_gpu);
  auto on_cpus = choose_backend(Backend::kGloo, support(false, false, true));
  EXPECT_EQ(on_cpus.backend, Backend::kGloo);
  EXPECT_FALSE(on_cpus.share_first_gpu);
}

TEST(BackendChoice, RefusesWhatCannotWorkSayingWhy) {
  const auto no_gloo = refusal([] { choose_backend(Backend::kGloo, support(true, true, false)); });
  EXPECT_NE(no_gloo.find("COLO_BACKEND=gloo"), std::string::npos) << no_gloo;
  EXPECT_NE(no_gloo.find("without Gloo's headers"), std::string::npos) << no_gloo;
  EXPECT_NE(no_gloo.find("tests/gpu/README.md"), std::string::npos) << no_gloo;

  const auto no_nccl = refusal([] { choose_backend(Backend::kNccl, support(true, false, true)); });
  EXPECT_NE(no_nccl.find("COLO_BACKEND=nccl: this LibTorch has no NCCL"), std::string::npos) << no_nccl;
  EXPECT_NE(no_nccl.find("set it to gloo"), std::string::npos) << no_nccl;

  const auto no_gpu = refusal([] { choose_backend(Backend::kNccl, support(false, true, true)); });
  EXPECT_NE(no_gpu.find("COLO_BACKEND=nccl: no CUDA GPU is visible"), std::string::npos) << no_gpu;

  const auto fine = choose_backend(Backend::kNccl, support(true, true, false));
  EXPECT_EQ(fine.backend, Backend::kNccl);
  EXPECT_FALSE(fine.share_first_gpu);
}

std::shared_ptr<ProcessGroup> world_of_one_from_env() {
  Environment env;
  env.rdzv_file = files::join(files::temp_directory(), "colo_backend_store_" + std::to_string(::getpid()) + "_" +
                                                           std::to_string(std::rand()));
  ProcessGroup::Options options;
  options.timeout = std::chrono::seconds(10);
  return init_world(env, options);  // no backend given: COLO_BACKEND's, or the default
}

// This process (the CPU build, or a GPU machine): its device and world follow COLO_BACKEND, and a
// request it cannot serve fails before any rendezvous.
TEST(BackendChoice, TheDeviceAndTheWorldFollowColoBackend) {
  const bool gpus = torch::cuda::is_available();
  {
    colo::testing::ScopedEnv gloo("COLO_BACKEND", "gloo");
    EXPECT_EQ(world_of_one_from_env()->backend(), Backend::kGloo);
    EXPECT_EQ(select_device(Environment{}), gpus ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU));
  }
  {
    colo::testing::ScopedEnv bogus("COLO_BACKEND", "infiniband");
    EXPECT_NE(refusal([] { select_device(Environment{}); }).find("COLO_BACKEND='infiniband'"), std::string::npos);
    EXPECT_NE(refusal([] { world_of_one_from_env(); }).find("COLO_BACKEND='infiniband'"), std::string::npos);
  }
  if (!gpus) {
    colo::testing::ScopedEnv nccl("COLO_BACKEND", "nccl");
    EXPECT_NE(refusal([] { select_device(Environment{}); }).find("COLO_BACKEND=nccl"), std::string::npos);
    EXPECT_NE(refusal([] { world_of_one_from_env(); }).find("COLO_BACKEND=nccl"), std::string::npos);
  }
  // An explicit backend is the program's own choice: COLO_BACKEND does not override it.
  {
    colo::testing::ScopedEnv other("COLO_BACKEND", gpus ? "gloo" : "nccl");
    Environment env;
    env.rdzv_file = files::join(files::temp_directory(), "colo_backend_explicit_" + std::to_string(::getpid()) + "_" +
                                                             std::to_string(std::rand()));
    ProcessGroup::Options options;
    options.timeout = std::chrono::seconds(10);
    options.backend = gpus ? Backend::kNccl : Backend::kGloo;
    EXPECT_EQ(init_world(env, options)->backend(), *options.backend);
  }
}

}  // namespace
}  // namespace colo::dist
