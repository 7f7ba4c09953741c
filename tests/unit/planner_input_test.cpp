// The planner's bad input (an unknown model, malformed cluster and profile files, a world no
// layout fits) and its command line, colo-plan, whose config train_vit accepts.
#include <colo/files/files.h>
#include <colo/nn/vision_transformer.h>
#include <colo/planner/file_error.h>
#include <colo/planner/planner.h>
#include <colo/planner/profiler.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fmt/format.h>
#include <fstream>
#include <limits>
#include <sstream>

#include "planner_fixture.h"
#include "profiler_timing.h"

namespace {

using colo::planner::PlannerFileError;
using planner_fixture::fixture_path;
using planner_fixture::fixture_request;

std::string error_of_cluster(const std::string& text) {
  try {
    colo::planner::parse_cluster(text, "bad_cluster.json");
  } catch (const PlannerFileError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(PlannerInput, AnUnknownModelListsTheKnownOnesAndTheClosest) {
  try {
    colo::planner::model_by_name("vit-b16");
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("unknown model 'vit-b16'"), std::string::npos) << what;
    EXPECT_NE(what.find("did you mean 'vit-b/16'"), std::string::npos) << what;
    EXPECT_NE(what.find("6.45b"), std::string::npos) << what;
  }
  EXPECT_EQ(colo::planner::model_by_name("giant").vit.embed_dim(), 4096);
  EXPECT_EQ(colo::planner::model_by_name("ViT-H/14").vit.patch_size(), 14);
}

TEST(PlannerInput, AClusterFieldOfTheWrongTypeIsNamedWithItsLine) {
  const std::string text =
      "{\n"
      "  \"gpus_per_node\": 8,\n"
      "  \"device\": {\"kind\": \"gpu\", \"memory_gib\": 80, \"peak_tflops\": {\"bf16\": 989}},\n"
      "  \"intra_node\": {\n"
      "    \"latency_us\": 20,\n"
      "    \"bus_bandwidth_GBps\": \"fast\"\n"
      "  }\n"
      "}\n";
  const auto what = error_of_cluster(text);
  EXPECT_NE(what.find("bad_cluster.json:6: field 'intra_node.bus_bandwidth_GBps'"), std::string::npos) << what;
  EXPECT_NE(what.find("expected a number"), std::string::npos) << what;
}

TEST(PlannerInput, AMissingOrMisspeltOrOutOfRangeClusterFieldIsNamed) {
  const std::string head = "{\n  \"gpus_per_node\": 8,\n  \"device\": {\"kind\": \"gpu\", \"memory_gib\": 80, "
                           "\"peak_tflops\": {\"bf16\": 989}},\n";
  auto what = error_of_cluster(head + "  \"intra_node\": {\"latency_us\": 20}\n}\n");
  EXPECT_NE(what.find(":4: field 'intra_node.bus_bandwidth_GBps': missing"), std::string::npos) << what;
  what = error_of_cluster(head + "  \"intra_node\": {\"latency_us\": 20, \"bus_bandwith_GBps\": 3}\n}\n");
  EXPECT_NE(what.find("field 'intra_node.bus_bandwith_GBps': unknown field (did you mean 'bus_bandwidth_GBps'?)"),
            std::string::npos)
      << what;
  what = error_of_cluster(head + "  \"intra_node\": {\"latency_us\": 20, \"bus_bandwidth_GBps\": 3},\n"
                                 "  \"overlap_efficiency\": 1.5\n}\n");
  EXPECT_NE(what.find(":5: field 'overlap_efficiency': expected a fraction in [0, 1], got 1.5"), std::string::npos)
      << what;
  what = error_of_cluster("{\n  \"gpus_per_node\": 8,\n  \"device\": {\"kind\": \"gpu\", \"memory_gib\": 80, "
                          "\"cores_per_node\": 2, \"peak_tflops\": {\"bf16\": 989}},\n"
                          "  \"intra_node\": {\"latency_us\": 20, \"bus_bandwidth_GBps\": 3}\n}\n");
  EXPECT_NE(what.find(":3: field 'device.cores_per_node': applies to CPU ranks"), std::string::npos) << what;
  what = error_of_cluster("{\n  \"gpus_per_node\": 8\n  \"device\": {}\n}\n");
  EXPECT_NE(what.find("bad_cluster.json:3:"), std::string::npos) << what;
  EXPECT_NE(what.find("malformed JSON"), std::string::npos) << what;
  what = error_of_cluster(head + "  \"intra_node\": {\"latency_us\": 20, \"bus_bandwidth_GBps\": 3},\n"
                                 "  \"small_messages\": [{\"below_bytes\": 1024, \"bandwidth_factor\": 0.5},\n"
                                 "                     {\"below_bytes\": 0, \"bandwidth_factor\": 0.9}]\n}\n");
  EXPECT_NE(what.find(":6: field 'small_messages[1].below_bytes'"), std::string::npos) << what;
}

// The synchronous extra of a cluster file: absent reads as 0 (files written before it existed),
// 0 itself is allowed, a negative one is refused naming its line, and to_json writes it back.
TEST(PlannerInput, TheSynchronousExtraLatencyIsReadCheckedAndWrittenBack) {
  const std::string head = "{\n  \"gpus_per_node\": 2,\n  \"device\": {\"kind\": \"cpu\", \"memory_gib\": 4, "
                           "\"peak_tflops\": {\"fp32\": 1}},\n"
                           "  \"intra_node\": {\"latency_us\": 100, \"bus_bandwidth_GBps\": 1}";
  EXPECT_EQ(colo::planner::parse_cluster(head + "\n}\n", "old.json").synchronous_extra_latency_s, 0.0);
  EXPECT_EQ(colo::planner::parse_cluster(head + ",\n  \"synchronous_extra_latency_us\": 0\n}\n", "zero.json")
                .synchronous_extra_latency_s,
            0.0);
  const auto read = colo::planner::parse_cluster(head + ",\n  \"synchronous_extra_latency_us\": 2500\n}\n", "c.json");
  EXPECT_NEAR(read.synchronous_extra_latency_s, 2.5e-3, 1e-15);
  EXPECT_NEAR(colo::planner::parse_cluster(colo::planner::to_json(read), "again.json").synchronous_extra_latency_s,
              2.5e-3, 1e-15);
  const auto what = error_of_cluster(head + ",\n  \"synchronous_extra_latency_us\": -1\n}\n");
  EXPECT_NE(what.find(":5: field 'synchronous_extra_latency_us'"), std::string::npos) << what;
}

// The measurement's arithmetic: the rounds' difference per call less the line, never below 0.
TEST(PlannerInput, TheSynchronousExtraIsTheDifferencePerCallBeyondTheLine) {
  using colo::planner::detail::synchronous_extra_seconds;
  // 32 rounds: 0.4 s with the all-reduces, 0.256 s without: 4.5 ms a call, the line 1 ms.
  EXPECT_NEAR(synchronous_extra_seconds(0.4, 0.256, 32, 1e-3), 3.5e-3, 1e-12);
  // At the boundary: a call costs exactly its line (0), and a little less than it (kept at 0).
  EXPECT_NEAR(synchronous_extra_seconds(0.288, 0.256, 32, 1e-3), 0.0, 1e-12);
  EXPECT_EQ(synchronous_extra_seconds(0.287, 0.256, 32, 1e-3), 0.0);
  EXPECT_GT(synchronous_extra_seconds(0.289, 0.256, 32, 1e-3), 0.0);
  EXPECT_EQ(synchronous_extra_seconds(1.0, 0.0, 0, 1e-3), 0.0);  // no rounds
}

// A profile's plugin_overheads: absent in older files (none), read and written back, an unknown
// key or a negative cost refused with its field and line.
TEST(PlannerInput, PluginOverheadsAreReadCheckedAndWrittenBack) {
  std::ifstream in(fixture_path("profile.json"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  EXPECT_TRUE(colo::planner::parse_profile(text, "old.json").plugin_overheads.empty());
  const auto end = text.rfind("\n}");
  ASSERT_NE(end, std::string::npos);
  const auto with = [&](const std::string& key, const std::string& per_element) {
    return text.substr(0, end) + ",\n \"plugin_overheads\": [\n  {\"key\": \"" + key +
           "\", \"depth\": 6, \"samples\": 16, \"elements\": 1000,\n   \"step_s\": 0.13, \"baseline_step_s\": 0.12, "
           "\"per_element_s\": " + per_element + "}\n ]\n}\n";
  };
  const auto read = colo::planner::parse_profile(with("gemini", "1e-08"), "p.json");
  ASSERT_EQ(read.plugin_overheads.size(), 1u);
  EXPECT_EQ(read.plugin_overheads[0].key, "gemini");
  EXPECT_EQ(read.plugin_overheads[0].depth, 6);
  EXPECT_EQ(read.plugin_overheads[0].elements, 1000);
  EXPECT_DOUBLE_EQ(read.plugin_overheads[0].per_element_s, 1e-8);
  ASSERT_NE(read.overhead("gemini"), nullptr);
  EXPECT_EQ(read.overhead("low_level_zero zero2"), nullptr);
  const auto again = colo::planner::parse_profile(colo::planner::to_json(read), "again.json");
  ASSERT_EQ(again.plugin_overheads.size(), 1u);
  EXPECT_DOUBLE_EQ(again.plugin_overheads[0].per_element_s, 1e-8);
  EXPECT_DOUBLE_EQ(again.plugin_overheads[0].baseline_step_s, 0.12);
  EXPECT_EQ(colo::planner::parse_profile(with("low_level_zero zero1", "0"), "zero.json").plugin_overheads[0].per_element_s,
            0.0);
  const auto line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(end), '\n') + 2;
  for (const auto& [bad, field] : {std::pair<std::string, std::string>{with("torch_ddp", "1e-08"), "key"},
                                   {with("gemini", "-1e-08"), "per_element_s"}}) {
    try {
      colo::planner::parse_profile(bad, "bad.json");
      ADD_FAILURE() << field << " accepted";
    } catch (const PlannerFileError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(fmt::format("bad.json:{}: field 'plugin_overheads[0].{}'", line + (field == "key" ? 0 : 1),
                                      field)),
                std::string::npos)
          << what;
    }
  }
}

// The measurement's arithmetic: the plugin's step less torch_ddp's, per parameter, never below 0.
TEST(PlannerInput, ThePluginOverheadIsTheDifferencePerParameterNeverBelowZero) {
  using colo::planner::detail::overhead_per_element;
  EXPECT_NEAR(overhead_per_element(0.138, 0.126, 1200000), 1e-8, 1e-18);
  // At the boundary: the same step (0), a little faster (kept at 0), a little slower (above 0).
  EXPECT_EQ(overhead_per_element(0.126, 0.126, 1000), 0.0);
  EXPECT_EQ(overhead_per_element(0.125, 0.126, 1000), 0.0);
  EXPECT_GT(overhead_per_element(0.127, 0.126, 1000), 0.0);
  EXPECT_EQ(overhead_per_element(0.2, 0.1, 0), 0.0);  // no parameters
}

// measure_plugin_overheads on the CPU: the three plugins against torch_ddp on the model cut to
// overhead_depth blocks (its parameters counted at that depth), the batch by default the largest
// micro-batch, and a depth or step count of 0 or a negative batch refused.
TEST(PlannerInput, PluginOverheadsAreMeasuredOnTheCutModel) {
  auto config = colo::nn::ViTConfig().image_size(16).patch_size(8).num_classes(3).embed_dim(16).depth(5).num_heads(2);
  auto options = colo::planner::ProfileOptions(config).precision("fp32").repeats(1).warmup(1).overhead_depth(2)
                     .overhead_samples(2).overhead_steps(1);
  const auto measured = colo::planner::measure_plugin_overheads(options);
  int64_t elements = 0;
  for (const auto& p : colo::nn::make_vision_transformer(config.depth(2))->parameters()) elements += p.numel();
  ASSERT_EQ(measured.size(), 3u);
  std::vector<std::string> keys;
  for (const auto& po : measured) {
    keys.push_back(po.key);
    EXPECT_EQ(po.depth, 2);
    EXPECT_EQ(po.samples, 2);
    EXPECT_EQ(po.elements, elements);
    EXPECT_GT(po.step_s, 0.0);
    EXPECT_GT(po.baseline_step_s, 0.0);
    EXPECT_GE(po.per_element_s, 0.0);
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"gemini", "low_level_zero zero1", "low_level_zero zero2"}));
  const auto by_default = colo::planner::measure_plugin_overheads(
      colo::planner::ProfileOptions(options).overhead_samples(0).microbatches({1, 3, 2}));
  EXPECT_EQ(by_default.front().samples, 3);
  for (auto bad : {colo::planner::ProfileOptions(options).overhead_depth(0),
                   colo::planner::ProfileOptions(options).overhead_samples(-1),
                   colo::planner::ProfileOptions(options).overhead_steps(0)}) {
    EXPECT_THROW(colo::planner::measure_plugin_overheads(bad), std::invalid_argument);
  }
}

TEST(PlannerInput, AProfileFieldIsNamedWithItsLine) {
  std::ifstream in(fixture_path("profile.json"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  // The head's second point loses its forward time.
  const auto head = text.find("\"layer\": \"head\"");
  ASSERT_NE(head, std::string::npos);
  const auto second = text.find("\"samples\": 8", head);
  const auto forward = text.find("\"forward_s\"", second);
  const auto line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(forward), '\n');
  text.replace(forward, std::string("\"forward_s\"").size(), "\"forwards\"");
  try {
    colo::planner::parse_profile(text, "bad_profile.json");
    FAIL() << "accepted";
  } catch (const PlannerFileError& e) {
    const std::string what = e.what();
    // The misspelt key itself, on its own line, is named: the missing field's usual cause.
    EXPECT_NE(what.find(fmt::format("bad_profile.json:{}: field 'layers[4].points[1].forwards': unknown field (did "
                                    "you mean 'forward_s'?)",
                                    line)),
              std::string::npos)
        << what;
  }
  // A profile of another model is refused with what differs.
  auto request = fixture_request(2, 16);
  request.model.vit.embed_dim(128).num_heads(4);
  try {
    colo::planner::StepModel model(request);
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("embed_dim 64, the model has 128"), std::string::npos) << e.what();
  }
}

TEST(PlannerInput, AWorldNoLayoutFitsSaysWhatMemoryOrWorldWould) {
  auto request = fixture_request(2, 16);
  request.cluster.device.memory_gib = 1.0 / 1024;  // 1 MiB per rank
  try {
    colo::planner::plan_layouts(request);
    FAIL() << "a layout fitted 1 MiB";
  } catch (const colo::planner::NoLayoutFits& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("no layout of fixture"), std::string::npos) << what;
    EXPECT_NE(what.find("GiB would do (--gpu-memory-gib)"), std::string::npos) << what;
  }
  // A batch no data-parallel size of these plugins divides.
  auto odd = fixture_request(2, 7);
  odd.plugins = {"torch_ddp", "low_level_zero", "gemini"};
  try {
    colo::planner::plan_layouts(odd);
    FAIL() << "planned a batch of 7 on 2 data-parallel ranks";
  } catch (const colo::planner::NoLayoutFits& e) {
    EXPECT_NE(std::string(e.what()).find("no layout splits the global batch 7 over 2 ranks"), std::string::npos)
        << e.what();
  }
}

TEST(PlannerInput, ALayoutThatCannotBeReadSaysWhichToken) {
  try {
    colo::planner::Layout::parse("hybrid_parallel pp2 mb4 zero4", 4);
    FAIL() << "accepted zero4";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("cannot read 'zero4'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(colo::planner::Layout::parse("hybrid_parallel pp3", 4), std::invalid_argument);
  EXPECT_THROW(colo::planner::Layout::parse("hybrid_parallel pp2", 4), std::invalid_argument);  // no mbN
  EXPECT_THROW(colo::planner::Layout::parse("torch_ddp dp3", 4), std::invalid_argument);
}

// colo-plan and train_vit, run as a user runs them.
class PlannerCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = colo::files::join(colo::files::temp_directory(), "planner_cli_" + std::to_string(::getpid()));
    colo::files::remove_all(dir_);
    colo::files::create_directories(dir_);
  }
  void TearDown() override { colo::files::remove_all(dir_); }

  int run(const std::string& command, std::string* output) const {
    const auto log = colo::files::join(dir_, "output.txt");
    const int status = std::system(("env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u COLO_RDZV_FILE " +
                                    command + " >" + log + " 2>&1")
                                       .c_str());
    std::ifstream in(log);
    std::stringstream text;
    text << in.rdbuf();
    *output = text.str();
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  const std::string plan_ = COLO_BINARY_DIR "/bin/colo-plan";
  const std::string train_ = COLO_BINARY_DIR "/bin/train_vit";
  const std::string model_ = "--model tiny --image-size 32 --patch-size 8 --hidden 64 --depth 5 --heads 4 "
                             "--mlp-ratio 2 --num-classes 10";
  std::string dir_;
};

TEST_F(PlannerCli, WritesAConfigTrainVitAccepts) {
  const auto config = colo::files::join(dir_, "planned.json");
  std::string out;
  ASSERT_EQ(run(plan_ + " " + model_ + " --world-size 2 --global-batch 16 --cluster " + fixture_path("cluster.json") +
                    " --profile " + fixture_path("profile.json") + " --out " + config,
                &out),
            0)
      << out;
  EXPECT_NE(out.find("PREDICTED"), std::string::npos) << out;
  EXPECT_NE(out.find("searched 172 layouts"), std::string::npos) << out;
  ASSERT_TRUE(colo::files::exists(config)) << out;
  ASSERT_EQ(run(train_ + " --config " + config + " --dry-run --world-size 2", &out), 0) << out;
  EXPECT_NE(out.find("memory plan"), std::string::npos) << out;
}

TEST_F(PlannerCli, ExplainsOneLayoutAndRefusesAnUnknownModel) {
  std::string out;
  ASSERT_EQ(run(plan_ + " " + model_ + " --world-size 2 --global-batch 8 --cluster " + fixture_path("cluster.json") +
                    " --profile " + fixture_path("profile.json") + " --explain 'hybrid_parallel pp2 gpipe mb2'",
                &out),
            0)
      << out;
  EXPECT_NE(out.find("pipeline bubble"), std::string::npos) << out;
  EXPECT_NE(out.find("bound by:"), std::string::npos) << out;
  EXPECT_EQ(run(plan_ + " --model vit-x --world-size 2 --global-batch 8", &out), 2) << out;
  EXPECT_NE(out.find("unknown model 'vit-x'"), std::string::npos) << out;
  EXPECT_EQ(run(plan_ + " " + model_ + " --world-size 2 --global-batch 8 --cluster " + fixture_path("profile.json"),
                &out),
            2)
      << out;
  EXPECT_NE(out.find("profile.json:"), std::string::npos) << out;
}

TEST_F(PlannerCli, TrainVitLayoutAutoTakesThePlannersChoice) {
  std::string out;
  ASSERT_EQ(run(train_ + " --layout auto --layout-cluster " + fixture_path("cluster.json") + " --layout-profile " +
                    fixture_path("profile.json") +
                    " --dataset synthetic --model custom --image-size 32 --patch-size 8 --embed-dim 64 --depth 5 "
                    "--heads 4 --mlp-ratio 2 --batch-size 16 --dry-run --world-size 2",
                &out),
            0)
      << out;
  EXPECT_NE(out.find("train_vit --layout auto:"), std::string::npos) << out;
  EXPECT_NE(out.find("memory plan"), std::string::npos) << out;
}

}  // namespace

// The profiler's back-to-back count: 0 picks the device's default, a negative count is refused
// naming the option (and its command-line flag) before anything is measured.
TEST(PlannerInput, ANegativeBackToBackCountIsRefusedBeforeMeasuring) {
  auto tiny = colo::nn::ViTConfig().image_size(8).patch_size(4).embed_dim(8).depth(1).num_heads(2).num_classes(3);
  auto options = colo::planner::ProfileOptions(tiny).precision("fp32").microbatches({1}).repeats(1).warmup(0)
                     .optimizer_sizes({16, 32});
  try {
    colo::planner::measure_profile(options.back_to_back(-1));
    FAIL() << "a negative back_to_back was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--back-to-back"), std::string::npos) << e.what();
  }
  const auto profile = colo::planner::measure_profile(options.back_to_back(2));
  ASSERT_FALSE(profile.layers.empty());
  for (const auto& layer : profile.layers) EXPECT_GT(layer.points.at(0).forward, 0.0) << layer.layer;
}

// --marginal: one call's steady cost is what k calls cost beyond one call alone, kept at or above
// half the k-call mean; it needs two or more calls back to back, and says which option to change.
TEST(PlannerInput, MarginalTimingSubtractsOneCallAndNeedsTwoCallsBackToBack) {
  using colo::planner::detail::marginal_seconds;
  EXPECT_DOUBLE_EQ(marginal_seconds(1.0, 1.6, 4), 0.8);   // (4 · 1.0 - 1.6) / 3
  EXPECT_DOUBLE_EQ(marginal_seconds(1.0, 2.4, 4), 1.6 / 3);
  EXPECT_DOUBLE_EQ(marginal_seconds(1.0, 2.5, 4), 0.5);   // the floor, reached exactly
  EXPECT_DOUBLE_EQ(marginal_seconds(1.0, 2.6, 4), 0.5);   // below it: held there
  EXPECT_DOUBLE_EQ(marginal_seconds(1.0, 0.2, 1), 1.0);   // one call: nothing to subtract
  EXPECT_DOUBLE_EQ(marginal_seconds(2.0, 2.0, 2), 2.0);   // no fixed cost: the mean itself

  auto tiny = colo::nn::ViTConfig().image_size(8).patch_size(4).embed_dim(8).depth(1).num_heads(2).num_classes(3);
  auto options = colo::planner::ProfileOptions(tiny).precision("fp32").microbatches({1}).repeats(1).warmup(0)
                     .optimizer_sizes({16, 32}).marginal(true);
  for (int k : {0, 1}) {  // 0: the CPU's default, one call
    try {
      colo::planner::measure_profile(options.back_to_back(k));
      FAIL() << "--marginal with " << k << " calls back to back was accepted";
    } catch (const std::invalid_argument& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("--marginal"), std::string::npos) << message;
      EXPECT_NE(message.find("--back-to-back 2 or more"), std::string::npos) << message;
    }
  }
  const auto profile = colo::planner::measure_profile(options.back_to_back(2));
  ASSERT_FALSE(profile.layers.empty());
  for (const auto& layer : profile.layers) {
    const auto& t = layer.points.at(0);
    EXPECT_GT(t.forward, 0.0) << layer.layer;
    EXPECT_GT(t.backward, 0.0) << layer.layer;
    EXPECT_GT(t.checkpointed_backward, 0.0) << layer.layer;
  }
}

// What a collective costs a step per call, from its timed calls (colo-plan profile --collectives):
// a Gloo collective between CPU ranks takes either ~0.5 ms or ~4 ms, and a step of dozens of them
// pays their mean, slow ones included; the median lands on one mode. Kept: the mean without the
// floor(5 %) fastest and slowest calls (a rank preempted once), which on one mode is its median.
TEST(PlannerInput, CollectiveCallCostIsTheTrimmedMeanOfItsCalls) {
  using colo::planner::detail::call_seconds;
  EXPECT_DOUBLE_EQ(call_seconds({}), 0.0);
  // Two modes, 12 fast and 8 slow: one fast and one slow call dropped, the rest averaged.
  std::vector<double> bimodal(12, 0.5e-3);
  bimodal.insert(bimodal.end(), 8, 4e-3);
  EXPECT_NEAR(call_seconds(bimodal), (11 * 0.5e-3 + 7 * 4e-3) / 18, 1e-12);
  // One mode: the mean is the median.
  EXPECT_NEAR(call_seconds({1.1e-3, 0.9e-3, 1.0e-3, 0.95e-3, 1.05e-3}), 1.0e-3, 1e-12);
  // The boundary: 19 calls keep all (floor(0.95) = 0 dropped), 20 drop one at each end.
  std::vector<double> calls(18, 1e-3);
  calls.push_back(40e-3);
  EXPECT_NEAR(call_seconds(calls), (18 * 1e-3 + 40e-3) / 19, 1e-12);
  calls.push_back(1e-3);
  EXPECT_NEAR(call_seconds(calls), 1e-3, 1e-12);
}

// Encoder blocks chained per timed call: outside 0 (the device's default) to the model's depth is
// refused naming the flag, before anything is measured; a chain's length is recorded in the
// profile and read back, and a profile written before the field existed reads as one block.
TEST(PlannerInput, BlocksPerCallIsBoundedRecordedAndReadBack) {
  auto tiny = colo::nn::ViTConfig().image_size(8).patch_size(4).embed_dim(8).depth(3).num_heads(2).num_classes(3);
  auto options = colo::planner::ProfileOptions(tiny).precision("fp32").microbatches({1}).repeats(1).warmup(0)
                     .optimizer_sizes({16, 32});
  for (int chain : {-1, 4}) {  // below 0; one past the depth
    try {
      colo::planner::measure_profile(options.blocks_per_call(chain));
      FAIL() << "blocks_per_call " << chain << " was accepted";
    } catch (const std::invalid_argument& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("--blocks-per-call " + std::to_string(chain)), std::string::npos) << message;
      EXPECT_NE(message.find("from 1 to the model's depth 3"), std::string::npos) << message;
    }
  }
  const auto chained = colo::planner::measure_profile(options.blocks_per_call(3));  // the depth itself
  EXPECT_EQ(chained.blocks_per_call, 3);
  EXPECT_EQ(colo::planner::measure_profile(options.blocks_per_call(0)).blocks_per_call, 1);  // the CPU's default
  for (const auto& layer : chained.layers) EXPECT_GT(layer.points.at(0).backward, 0.0) << layer.layer;
  const auto text = colo::planner::to_json(chained);
  EXPECT_EQ(colo::planner::parse_profile(text, "chained.json").blocks_per_call, 3);

  std::ifstream in(fixture_path("profile.json"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  ASSERT_EQ(buffer.str().find("blocks_per_call"), std::string::npos) << "the fixture predates the field";
  EXPECT_EQ(colo::planner::parse_profile(buffer.str(), "profile.json").blocks_per_call, 1);
}

// A chain's time is shared by its blocks: timing three blocks in one call gives a block about a
// third of the chain, so a block's figure stays near one block timed alone (on the CPU a call has
// no launch overhead to share), not three times it.
TEST(PlannerInput, AChainedBlockCostsItsShareOfTheChain) {
  auto small = colo::nn::ViTConfig().image_size(32).patch_size(4).embed_dim(64).depth(3).num_heads(4).num_classes(10);
  auto options = colo::planner::ProfileOptions(small).precision("fp32").microbatches({8}).repeats(5).warmup(1)
                     .optimizer_sizes({16, 32});
  const auto block = [](const colo::planner::CostProfile& p) {
    for (const auto& layer : p.layers) {
      if (layer.layer == "encoder_block") return layer.points.at(0).forward + layer.points.at(0).backward;
    }
    return 0.0;
  };
  // The least of three alternating rounds each: a loaded machine (CI runs tests beside builds) only
  // ever adds time, and one slow round once put a single pair outside the bounds.
  double one = std::numeric_limits<double>::infinity(), share = one;
  for (int round = 0; round < 3; ++round) {
    one = std::min(one, block(colo::planner::measure_profile(options.blocks_per_call(1))));
    share = std::min(share, block(colo::planner::measure_profile(options.blocks_per_call(3))));
  }
  ASSERT_GT(one, 0.0);
  EXPECT_GT(share / one, 0.5);
  EXPECT_LT(share / one, 1.5);  // measured 0.93-0.95; 2.29 with the chain left undivided
}
