// cuda_graphs=true (issue 44) where it cannot run: on a CPU, and in the layouts and plugins that
// do not have it yet; and the pipeline layouts its options accept. Each refusal names why and the
// option to change; the GPU tests (tests/gpu/cuda_graph_test.cpp, and tests/dist/cuda_graphs_test.cpp
// over NCCL) check that the graphed runs equal the eager ones.
#include <colo/booster/plugin_registry.h>
#include <colo/dist/environment.h>
#include <colo/dist/process_group.h>
#include <colo/files/files.h>
#include <colo/nn/cuda_graphed_stack.h>

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "tiny_layer_stack.h"

namespace {

using colo::PluginContext;
using colo::PluginOptions;
using colo::PluginRegistry;

std::shared_ptr<colo::dist::ProcessGroup> graphs_world_of_one() {
  const auto path = colo::files::join(colo::files::temp_directory(), "colo_graphs_unit_store_" +
                                                                         std::to_string(::getpid()) + "_" +
                                                                         std::to_string(std::rand()));
  colo::dist::Environment env;
  env.rdzv_file = path;
  colo::dist::ProcessGroup::Options options;
  options.timeout = std::chrono::seconds(10);
  return colo::dist::init_world(env, options);
}

std::string plugin_error(const std::string& name, const PluginOptions& options, const PluginContext& context) {
  try {
    PluginRegistry::global().create(name, options, context);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
}

TEST(CudaGraphs, AStackOnTheCpuIsRefusedWithTheReason) {
  const auto reason = colo::nn::cuda_graphs_unavailable_reason(torch::Device(torch::kCPU));
  ASSERT_TRUE(reason.has_value());
  try {
    colo::nn::CudaGraphedStack graphed(colo::test::tiny_layer_stack(3));
    ADD_FAILURE() << "a CPU stack was accepted";
  } catch (const std::invalid_argument& e) {
    expect_contains(e.what(), "cuda_graphs: ");
    expect_contains(e.what(), *reason);
  }
}

TEST(CudaGraphs, PluginsOnTheCpuRefuseAndSayWhichOptionToChange) {
  auto world = graphs_world_of_one();
  const PluginContext cpu{world, c10::kCPU};
  for (const std::string name : {"torch_ddp", "hybrid_parallel"}) {
    SCOPED_TRACE(name);
    const auto message = plugin_error(name, {{"cuda_graphs", "true"}}, cpu);
    expect_contains(message, name + ": cuda_graphs=true cannot run");
    expect_contains(message, "set cuda_graphs=false");
  }
  // Off, nothing changes.
  EXPECT_EQ(plugin_error("torch_ddp", {{"cuda_graphs", "false"}}, cpu), "");
}

TEST(CudaGraphs, HybridLayoutsAGraphCannotHoldAreRefusedByOption) {
  const PluginContext none{};
  const auto tp = plugin_error("hybrid_parallel", {{"cuda_graphs", "true"}, {"tp_size", "2"}}, none);
  expect_contains(tp, "cuda_graphs with tp_size=2 is not implemented yet");
  expect_contains(tp, "use tp_size=1 or cuda_graphs=false");
  const auto zero = plugin_error("hybrid_parallel", {{"cuda_graphs", "true"}, {"zero_stage", "1"}}, none);
  expect_contains(zero, "cuda_graphs with zero_stage=1 is not implemented yet");
  const auto bubble = plugin_error(
      "hybrid_parallel", {{"cuda_graphs", "true"}, {"pp_size", "2"}, {"pp_style", "zero_bubble"}, {"num_microbatches", "4"}},
      none);
  expect_contains(bubble, "cuda_graphs with pp_style=zero_bubble is not implemented");
  expect_contains(bubble, "use pp_style=1f1b, gpipe or interleaved, or cuda_graphs=false");
}

// Pipelines hold several microbatches per stage (a capture slot each) and the data-parallel
// reduction runs after the backward graphs: the options accept them. Without a world the plugin
// then stops at its mesh, which says nothing of cuda_graphs.
TEST(CudaGraphs, HybridPipelinesOfEveryScheduleButZeroBubbleAreAccepted) {
  const PluginContext none{};
  for (const auto& layout : std::vector<PluginOptions>{
           {{"pp_size", "2"}, {"num_microbatches", "4"}},
           {{"pp_size", "4"}, {"microbatch_size", "2"}},
           {{"pp_size", "2"}, {"pp_style", "gpipe"}, {"num_microbatches", "4"}},
           {{"pp_size", "2"}, {"pp_style", "interleaved"}, {"num_model_chunks", "2"}, {"num_microbatches", "4"}},
           {{"pp_style", "gpipe"}, {"num_microbatches", "4"}}}) {
    auto options = layout;
    options["cuda_graphs"] = "true";
    const auto message = plugin_error("hybrid_parallel", options, none);
    SCOPED_TRACE(message);
    EXPECT_EQ(message.find("cuda_graphs"), std::string::npos);
    expect_contains(message, "world process group");
  }
}

TEST(CudaGraphs, ZeroPluginsSayTheyDoNotHaveIt) {
  const PluginContext none{};
  expect_contains(plugin_error("low_level_zero", {{"cuda_graphs", "true"}}, none),
                  "cuda_graphs=true is not implemented for low_level_zero");
  expect_contains(plugin_error("gemini", {{"cuda_graphs", "true"}}, none),
                  "cuda_graphs=true is not implemented for gemini");
}

}  // namespace
