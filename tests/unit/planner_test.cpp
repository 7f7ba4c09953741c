// The performance model on recorded inputs (planner_fixtures/): a fixed profile and cluster in,
// the expected breakdown out, derived by hand in the comments. No timing: a change to the model
// shows here. Units: seconds. The fixture's layer times at 8 samples: patch embedding and head
// F 2 ms, B 4 ms; a block F 20 ms, B 40 ms (tp 2: 12 / 24; tp 2 with sp: 10 / 20); at 4 samples
// half of that; B splits into input and weight gradient equally; a checkpointed backward is
// F + B. Collectives: 100 us + moved bytes / 1 GB/s; Adam 10 ns per element.
#include <colo/booster/booster.h>
#include <colo/planner/planner.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <set>
#include <string>
#include <utility>

#include "planner_fixture.h"

namespace {

using colo::planner::Layout;
using colo::planner::StepModel;
using planner_fixture::fixture_request;

constexpr double kEps = 1e-9;
constexpr double kParams = 181642;  // 13504 patch embedding + 5 x 33472 blocks + 778 head

Layout layout(const std::string& text, int world) { return Layout::parse(text, world); }

TEST(PlannerStepModel, DataParallelStepIsComputeThenTheLastBucketAndAdam) {
  StepModel model(fixture_request(2, 16));
  const auto p = model.predict(layout("torch_ddp", 2));
  // 8 samples per rank: 6 ms + 5 x 60 ms + 6 ms.
  EXPECT_NEAR(p.breakdown.compute, 0.312, kEps);
  // One bucket of 181642 x 4 bytes, all-reduced over 2 ranks: 100 us + 726568 B / 1 GB/s; a
  // single bucket cannot hide behind the backward that produces it.
  EXPECT_NEAR(p.breakdown.dp_comm, 1e-4 + 726568e-9, kEps);
  EXPECT_NEAR(p.breakdown.optimizer, kParams * 1e-8, kEps);
  EXPECT_EQ(p.breakdown.bubble, 0.0);
  EXPECT_EQ(p.breakdown.tp_comm, 0.0);
  EXPECT_NEAR(p.step_seconds, 0.312 + 8.26568e-4 + 1.81642e-3, kEps);
  EXPECT_NEAR(p.images_per_second, 16 / p.step_seconds, 1e-6);
  EXPECT_EQ(p.bound, "compute");
}

TEST(PlannerStepModel, CpuRanksThatOutnumberTheCoresShareThem) {
  // Two ranks of a node: on one core each rank's compute and Adam take twice their profile; on
  // two or more cores (or cores not given: 0) their profile.
  for (const int cores : {0, 1, 2, 3}) {
    auto request = fixture_request(2, 16);
    request.cluster.device.cores_per_node = cores;
    const double slowdown = cores == 1 ? 2.0 : 1.0;
    const auto p = StepModel(request).predict(layout("torch_ddp", 2));
    EXPECT_NEAR(p.breakdown.compute, slowdown * 0.312, kEps) << cores << " cores";
    EXPECT_NEAR(p.breakdown.optimizer, slowdown * kParams * 1e-8, kEps) << cores << " cores";
    EXPECT_NEAR(p.breakdown.dp_comm, 1e-4 + 726568e-9, kEps) << "measured over these ranks already";
  }
}

TEST(PlannerStepModel, CheckpointingRecomputesEveryLayerButTheFirst) {
  StepModel model(fixture_request(2, 16));
  const auto p = model.predict(layout("torch_ddp ckpt", 2));
  // The patch embedding's input needs no gradient: F + B = 6 ms. Blocks: 20 + 60 ms each; head 2 + 6.
  EXPECT_NEAR(p.breakdown.compute, 0.006 + 5 * 0.080 + 0.008, kEps);
  EXPECT_NEAR(p.breakdown.recompute, 5 * 0.020 + 0.002, kEps);
}

TEST(PlannerStepModel, ZeroStagesReduceScatterAndGatherAndStepAShard) {
  StepModel model(fixture_request(2, 16));
  // Reduce-scatter and all-gather of the 726568 bytes over 2 ranks: 100 us + 363284 B / 1 GB/s each.
  const double half = 1e-4 + 363284e-9;
  const auto zero2 = model.predict(layout("low_level_zero zero2", 2));
  EXPECT_NEAR(zero2.breakdown.dp_comm, 2 * half, kEps);
  EXPECT_NEAR(zero2.breakdown.optimizer, 90821 * 1e-8, kEps);  // ceil(181642 / 2) elements
  // ZeRO-1 all-reduces the gradients, then gathers the weights.
  const auto zero1 = model.predict(layout("low_level_zero zero1", 2));
  EXPECT_NEAR(zero1.breakdown.dp_comm, 1e-4 + 726568e-9 + half, kEps);
  // gemini gathers every chunk in forward and again in backward and reduce-scatters it once
  // (GeminiPaysACollectivePerChunk has the count): the 312 ms of compute beside them are longer, so
  // overlap_efficiency 0.5 hides half of them; never less than the first chunk's two gathers and
  // the last one's reduce-scatter stays.
  const auto gemini = model.predict(layout("gemini static", 2));
  const double chunks = static_cast<double>(model.memory_plan(layout("gemini static", 2)).ranks.at(0).chunks);
  const double one = 1e-4 + 363284e-9 / chunks;
  ASSERT_GT(chunks, 2.0) << "else the floor decides";
  EXPECT_NEAR(gemini.breakdown.dp_comm, 0.5 * chunks * 3 * one, kEps);
  EXPECT_NEAR(gemini.step_seconds, 0.312 + gemini.breakdown.dp_comm + 90821 * 1e-8, kEps);
}

TEST(PlannerStepModel, GeminiPaysACollectivePerChunk) {
  // Nothing hidden (overlap_efficiency 0): every chunk's gathers (forward and backward, each pass)
  // and its reduce-scatter pay the collective's 100 us; the bytes are the model's 726568 either way.
  auto request = fixture_request(2, 16);
  request.cluster.overlap_efficiency = 0.0;
  const StepModel model(request);
  for (const char* text : {"gemini static", "gemini static accum2", "hybrid_parallel dp2 zero3"}) {
    SCOPED_TRACE(text);
    const auto l = layout(text, 2);
    const double chunks = static_cast<double>(model.memory_plan(l).ranks.at(0).chunks);
    EXPECT_GT(chunks, 1.0) << "a chunk per block or so: the fixture's largest parameter is 12288 of 181642";
    const double passes = l.grad_accum;
    const double one = 1e-4 + 363284e-9 / chunks;  // one chunk's gather or reduce-scatter
    EXPECT_NEAR(model.predict(l).breakdown.dp_comm, chunks * (2 * passes + 1) * one, kEps);
  }
  // One bucket pays its fixed cost once: ZeRO-2's reduce-scatter and gather.
  EXPECT_NEAR(model.predict(layout("low_level_zero zero2", 2)).breakdown.dp_comm, 2 * (1e-4 + 363284e-9), kEps);
}

TEST(PlannerStepModel, TensorParallelCollectivesStayOnTheCriticalPath) {
  StepModel model(fixture_request(2, 8));
  // tp 2, 8 samples: blocks at 12 + 24 ms. Per block and direction two all-reduces of
  // 8 x 17 x 64 x 4 = 34816 bytes: 100 us + 34816 B / 1 GB/s each.
  const auto plain = model.predict(layout("hybrid_parallel tp2", 2));
  EXPECT_NEAR(plain.breakdown.compute, 0.006 + 5 * 0.036 + 0.006, kEps);
  EXPECT_NEAR(plain.breakdown.tp_comm, 5 * 4 * (1e-4 + 34816e-9), kEps);
  // tp 2 holds the blocks' split parameters halved: 13504 + 5 x (384 + 33088 / 2) + 778.
  EXPECT_NEAR(plain.breakdown.optimizer, 98922 * 1e-8, kEps);
  // Sequence parallelism: 18 tokens (17 padded to a multiple of 2), per block and direction two
  // all-gathers and two reduce-scatters of 36864 bytes (100 us + 18432 B / 1 GB/s each), and the
  // patch embedding's and head's gathers; and backward, per block, the six replicated parameters'
  // gradients (two LayerNorms' weight and bias, proj's and fc2's bias: 64 x 4 = 256 bytes each)
  // all-reduced over tp (100 us + 256 B / 1 GB/s each).
  const auto sp = model.predict(layout("hybrid_parallel tp2 sp", 2));
  const double piece = 1e-4 + 18432e-9;
  const double partial_gradient = 1e-4 + 256e-9;
  EXPECT_NEAR(sp.breakdown.compute, 0.006 + 5 * 0.030 + 0.006, kEps);
  EXPECT_NEAR(sp.breakdown.tp_comm, 5 * 8 * piece + 2 * piece + 5 * 6 * partial_gradient, kEps);
}

// A collective waited on right after computation pays the cluster's synchronous extra on top of
// its line: every tensor-parallel collective does (the numbers of the test above, each + 1 ms),
// data parallelism's buckets and a pipeline's sends do not (what they cost is unchanged).
TEST(PlannerStepModel, TensorParallelCollectivesPayTheSynchronousExtraAndNothingElseDoes) {
  auto request = fixture_request(2, 8);
  const StepModel before(request);
  request.cluster.synchronous_extra_latency_s = 1e-3;
  const StepModel model(request);
  const double extra = 1e-3;
  const auto plain = model.predict(layout("hybrid_parallel tp2", 2));
  EXPECT_NEAR(plain.breakdown.tp_comm, 5 * 4 * (1e-4 + 34816e-9 + extra), kEps);
  EXPECT_NEAR(plain.step_seconds - before.predict(layout("hybrid_parallel tp2", 2)).step_seconds, 5 * 4 * extra, kEps);
  const auto sp = model.predict(layout("hybrid_parallel tp2 sp", 2));
  const double piece = 1e-4 + 18432e-9 + extra;
  const double partial_gradient = 1e-4 + 256e-9 + extra;
  EXPECT_NEAR(sp.breakdown.tp_comm, 5 * 8 * piece + 2 * piece + 5 * 6 * partial_gradient, kEps);
  for (const char* text : {"torch_ddp", "low_level_zero zero2", "gemini static", "hybrid_parallel pp2 1f1b mb2",
                           "hybrid_parallel 1f1b mb2"}) {
    const auto now = model.predict(layout(text, 2));
    const auto then = before.predict(layout(text, 2));
    EXPECT_NEAR(now.step_seconds, then.step_seconds, kEps) << text;
    EXPECT_NEAR(now.breakdown.dp_comm, then.breakdown.dp_comm, kEps) << text;
    EXPECT_NEAR(now.breakdown.pp_comm, then.breakdown.pp_comm, kEps) << text;
  }
}

// The plugins' own step costs (CostProfile::plugin_overheads): gemini and low_level_zero at each
// stage pay their measured seconds per parameter × the parameters the rank holds whole (kParams,
// at tp 1), once a step; torch_ddp and hybrid_parallel pay nothing, and a layout whose key was not
// measured pays nothing either.
TEST(PlannerStepModel, GeminiAndZeroPayTheirMeasuredOwnWorkAndNothingElseDoes) {
  auto request = fixture_request(2, 16);
  const StepModel before(request);
  auto overhead = [](const std::string& key, double per_element) {
    colo::planner::PluginOverhead po;
    po.key = key;
    po.per_element_s = per_element;
    return po;
  };
  request.profile->plugin_overheads = {overhead("gemini", 5e-8), overhead("low_level_zero zero1", 2e-8),
                                       overhead("low_level_zero zero2", 3e-8)};
  const StepModel model(request);
  for (const auto& [text, per_element] : {std::pair<const char*, double>{"gemini static", 5e-8},
                                          {"gemini auto", 5e-8},
                                          {"low_level_zero zero1", 2e-8},
                                          {"low_level_zero zero2", 3e-8},
                                          {"low_level_zero zero2 accum2", 3e-8}}) {
    const auto now = model.predict(layout(text, 2));
    const auto then = before.predict(layout(text, 2));
    EXPECT_NEAR(now.breakdown.plugin_work, per_element * kParams, kEps) << text;
    EXPECT_NEAR(now.step_seconds - then.step_seconds, per_element * kParams, kEps) << text;
    EXPECT_NEAR(now.breakdown.compute, then.breakdown.compute, kEps) << text;
  }
  for (const char* text : {"torch_ddp", "torch_ddp accum2", "hybrid_parallel tp2", "hybrid_parallel pp2 1f1b mb2",
                           "hybrid_parallel 1f1b mb2 zero1"}) {
    const auto now = model.predict(layout(text, 2));
    EXPECT_EQ(now.breakdown.plugin_work, 0.0) << text;
    EXPECT_NEAR(now.step_seconds, before.predict(layout(text, 2)).step_seconds, kEps) << text;
  }
  request.profile->plugin_overheads = {overhead("gemini", 5e-8)};
  EXPECT_EQ(StepModel(request).predict(layout("low_level_zero zero2", 2)).breakdown.plugin_work, 0.0);
}

// 2d on a 2 x 2 grid (tp 4), 8 samples: T = 136 tokens, 4 bytes an element (docs/tensor_parallel_modes.md,
// whose counts tests/dist/tp_traffic_test.cpp checks against the code). Per Linear2D(in, out):
// forward two broadcasts of the input block (T·in/4 elements) and two of the weight block
// (out·in/4); backward those again, the reduce-scatters of the stacked dX (T·in/2) and dW
// (out·in/2) terms and the bias's all-reduce (out/2). Per LayerNorm2D: two all-reduces of T/2
// statistics each way, and backward two of h/2. The region's edges: the head's two gathers
// (T·h/2 and T·h gathered) and the embedding's backward ones. Every group has 2 ranks, 100 us +
// moved bytes / 1 GB/s: a broadcast or an all-reduce moves B, an all-gather or reduce-scatter B/2.
TEST(PlannerStepModel, TwoDimensionalTensorParallelismPaysTheCostNotesCollectives) {
  auto request = fixture_request(4, 8);
  auto block = request.profile->layers[2];  // the block at tp 2 stands for tp 4's compute here
  block.tp = 4;
  request.profile->layers.push_back(block);
  StepModel model(request);
  const auto two_d = model.predict(layout("hybrid_parallel tp4 2d", 4));
  const double T = 8 * 17, h = 64, m = 128, e = 4;
  auto seconds = [](double moved) { return 1e-4 + moved * 1e-9; };
  double block_comm = 0;
  for (const auto& [in, out] : {std::pair{h, 3 * h}, std::pair{h, h}, std::pair{h, m}, std::pair{m, h}}) {
    const double broadcasts = 2 * (seconds(T * in / 4 * e) + seconds(out * in / 4 * e));
    block_comm += 2 * broadcasts + seconds(T * in / 2 * e / 2) + seconds(out * in / 2 * e / 2) + seconds(out / 2 * e);
  }
  block_comm += 2 * (4 * seconds(T / 2 * e) + 2 * seconds(h / 2 * e));
  const double edges = 2 * (seconds(T * h / 2 * e / 2) + seconds(T * h * e / 2));
  EXPECT_NEAR(two_d.breakdown.tp_comm, 5 * block_comm + edges, kEps);
  EXPECT_EQ(layout("hybrid_parallel tp4 2d", 4).plugin_options("fp32").at("tp_mode"), "2d");
  EXPECT_EQ(layout("hybrid_parallel tp4 2d", 4).name(), "hybrid_parallel dp1 pp1 tp4 2d zero0");
  // The search offers 2d where tp is a square inside a node, never with sequence parallelism.
  request.cluster.gpus_per_node = 4;
  std::set<std::string> names;
  for (const auto& l : colo::planner::enumerate_layouts(request)) names.insert(l.name());
  EXPECT_EQ(names.count("hybrid_parallel dp1 pp1 tp4 2d zero0"), 1u);
  EXPECT_EQ(names.count("hybrid_parallel dp2 pp1 tp2 2d zero0"), 0u);
  for (const auto& name : names) EXPECT_FALSE(name.find(" 2d") != std::string::npos && name.find(" sp") != std::string::npos) << name;
  for (const auto& [text, says] : {std::pair<std::string, std::string>{"hybrid_parallel tp2 2d", "2d needs tp = q²"},
                                   {"hybrid_parallel tp4 2d sp", "2d splits the activations already: drop sp"}}) {
    try {
      colo::planner::Layout::parse(text, 4);
      ADD_FAILURE() << text << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  }
}

// Eight ranks on one node of 8, 8 samples, the block at tp 2 standing for tp 8's compute (the
// grid modes' cases below price only their collectives).
colo::planner::PlanRequest one_node_of_eight() {
  auto request = fixture_request(8, 8);
  request.cluster.gpus_per_node = 8;
  auto block = request.profile->layers[2];
  block.tp = 8;
  request.profile->layers.push_back(block);
  return request;
}

// 2.5d on 2 layers of a 2 x 2 grid (tp 8, one node of 8), 8 samples: each layer runs 2d's
// collectives (the test above) on its 4 samples, T = 68 tokens; the depth group (2 ranks)
// all-reduces per linear the weight block (out·in/4) and the bias block (out/2), per LayerNorm the
// weight and bias (h/2); the edges add the layers' shares gathered over depth ([136, h]).
TEST(PlannerStepModel, TwoAndAHalfDimensionalTensorParallelismPaysTheCostNotesCollectives) {
  auto request = one_node_of_eight();
  StepModel model(request);
  const auto layered = model.predict(layout("hybrid_parallel tp8 2.5d depth2", 8));
  const double T = 4 * 17, h = 64, m = 128, e = 4;
  auto seconds = [](double moved) { return 1e-4 + moved * 1e-9; };
  double block_comm = 0;
  for (const auto& [in, out] : {std::pair{h, 3 * h}, std::pair{h, h}, std::pair{h, m}, std::pair{m, h}}) {
    const double broadcasts = 2 * (seconds(T * in / 4 * e) + seconds(out * in / 4 * e));
    block_comm += 2 * broadcasts + seconds(T * in / 2 * e / 2) + seconds(out * in / 2 * e / 2) + seconds(out / 2 * e);
    block_comm += seconds(out * in / 4 * e) + seconds(out / 2 * e);  // the depth sums
  }
  block_comm += 2 * (4 * seconds(T / 2 * e) + 2 * seconds(h / 2 * e) + 2 * seconds(h / 2 * e));
  const double edges = 2 * (seconds(T * h / 2 * e / 2) + seconds(T * h * e / 2) + seconds(2 * T * h * e / 2));
  EXPECT_NEAR(layered.breakdown.tp_comm, 5 * block_comm + edges, kEps);
  const auto options = layout("hybrid_parallel tp8 2.5d depth2", 8).plugin_options("fp32");
  EXPECT_EQ(options.at("tp_mode"), "2.5d");
  EXPECT_EQ(options.at("tp_depth"), "2");
  EXPECT_EQ(layout("hybrid_parallel tp8 2.5d depth2", 8).name(), "hybrid_parallel dp1 pp1 tp8 2.5d depth2 zero0");
  std::set<std::string> names;
  for (const auto& l : colo::planner::enumerate_layouts(request)) names.insert(l.name());
  EXPECT_EQ(names.count("hybrid_parallel dp1 pp1 tp8 2.5d depth2 zero0"), 1u);
  EXPECT_EQ(names.count("hybrid_parallel dp2 pp1 tp4 2.5d depth1 zero0"), 0u) << "depth 1 is 2d";
  for (const auto& [text, says] :
       {std::pair<std::string, std::string>{"hybrid_parallel tp8 2.5d depth3", "2.5d with depth3 needs tp = q² x 3"},
        {"hybrid_parallel tp8 depth2", "depth2 is 2.5d's: add 2.5d or drop it"},
        {"hybrid_parallel tp8 2.5d depth2 sp", "2.5d splits the activations already: drop sp"}}) {
    try {
      colo::planner::Layout::parse(text, 8);
      ADD_FAILURE() << text << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  }
}

// 3d on a 2 x 2 x 2 cube (tp 8, one node of 8), 8 samples: T = 136 tokens, 4 bytes an element
// (docs/tensor_parallel_modes.md's "3D", checked against the code by tp_traffic_test.cpp). Per
// Linear3D(in, out) on lines of 2 ranks: forward the input [T/2, in/2] and the weight block
// [out/2, in/2] gathered and the product [T/2, out/2] reduce-scattered; backward dY gathered, the
// weight and the input gathered again, dX and dW reduce-scattered; the bias [out/2] on a plane of 4
// ranks: qkv's and fc1's all-reduced, proj's and fc2's gathered forward and reduce-scattered back.
// Per LayerNorm3D: two all-reduces of T/4 statistics on a line each way, the weight and bias [h/2]
// gathered on the plane forward and reduce-scattered back. Edges: the features gathered on a line
// ([T/4, h]), then the rows on the plane ([T, h]). 100 us + moved / 1 GB/s; on a line an all-gather
// or reduce-scatter moves B/2 and an all-reduce B, on a plane 3B/4 and 3B/2.
TEST(PlannerStepModel, ThreeDimensionalTensorParallelismPaysTheCostNotesCollectives) {
  auto request = one_node_of_eight();
  StepModel model(request);
  const auto three_d = model.predict(layout("hybrid_parallel tp8 3d", 8));
  const double T = 8 * 17, h = 64, m = 128, e = 4;
  auto line = [](double bytes) { return 1e-4 + bytes / 2 * 1e-9; };  // all-gather, reduce-scatter
  auto line_sum = [](double bytes) { return 1e-4 + bytes * 1e-9; };   // all-reduce
  auto plane = [](double bytes) { return 1e-4 + bytes * 3 / 4 * 1e-9; };
  auto plane_sum = [](double bytes) { return 1e-4 + bytes * 3 / 2 * 1e-9; };
  double block_comm = 0;
  struct L {
    double in, out;
    bool outer;
  };
  for (const auto& l : {L{h, 3 * h, true}, L{h, h, false}, L{h, m, true}, L{m, h, false}}) {
    const double x = line(T * l.in / 4 * e), w = line(l.out * l.in / 4 * e), y = line(T * l.out / 4 * e);
    block_comm += (x + w + y) + (y + w + x + x + w);
    block_comm += l.outer ? plane_sum(l.out / 2 * e) : 2 * plane(l.out / 2 * e);
  }
  block_comm += 2 * (4 * line_sum(T / 4 * e) + 4 * plane(h / 2 * e));
  const double edges = 2 * (line(T * h / 4 * e) + plane(T * h * e));
  EXPECT_NEAR(three_d.breakdown.tp_comm, 5 * block_comm + edges, kEps);
  EXPECT_EQ(layout("hybrid_parallel tp8 3d", 8).plugin_options("fp32").at("tp_mode"), "3d");
  EXPECT_EQ(layout("hybrid_parallel tp8 3d", 8).name(), "hybrid_parallel dp1 pp1 tp8 3d zero0");
  // The search offers 3d where tp is a cube inside a node whose side divides the heads and the
  // MLP and whose cube divides the width, never with sequence parallelism.
  std::set<std::string> names;
  for (const auto& l : colo::planner::enumerate_layouts(request)) names.insert(l.name());
  EXPECT_EQ(names.count("hybrid_parallel dp1 pp1 tp8 3d zero0"), 1u);
  EXPECT_EQ(names.count("hybrid_parallel dp2 pp1 tp4 3d zero0"), 0u);
  for (const auto& name : names) EXPECT_FALSE(name.find(" 3d") != std::string::npos && name.find(" sp") != std::string::npos) << name;
  for (const auto& [text, says] : {std::pair<std::string, std::string>{"hybrid_parallel tp4 3d", "3d needs tp = q³"},
                                   {"hybrid_parallel tp8 3d sp", "3d splits the activations already: drop sp"}}) {
    try {
      colo::planner::Layout::parse(text, 8);
      ADD_FAILURE() << text << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  }
}

// The config colo-plan writes keeps a grid mode: the hybrid example's "tensor" words (mode, size,
// and depth for 2.5d) in place of "tp", which would train 1d.
TEST(PlannerStepModel, TheWrittenConfigKeepsTheTensorParallelMode) {
  auto request = one_node_of_eight();
  StepModel model(request);
  using json = nlohmann::json;
  const auto parallel_of = [&](const std::string& text) {
    return json::parse(colo::planner::train_vit_config(model.predict(layout(text, 8)), request)).at("parallel");
  };
  const auto cube = parallel_of("hybrid_parallel tp8 3d");
  EXPECT_EQ(cube.at("tensor"), (json{{"mode", "3d"}, {"size", 8}})) << cube.dump();
  EXPECT_FALSE(cube.contains("tp")) << cube.dump();
  EXPECT_EQ(parallel_of("hybrid_parallel tp8 2.5d depth2").at("tensor"), (json{{"mode", "2.5d"}, {"size", 8}, {"depth", 2}}));
  const auto plain = parallel_of("hybrid_parallel tp2");
  EXPECT_EQ(plain.at("tp"), 2);
  EXPECT_FALSE(plain.contains("tensor")) << plain.dump();
}

// pp 2, 2 microbatches of 4 samples. Stage 0: the patch embedding and blocks 0-1 (F 21 ms, B 42 ms),
// stage 1: blocks 2-4 and the head (F 31 ms, B 62 ms); a stage's send (100 us + 4 x 17 x 64 x 4 =
// 17408 B / 1 GB/s = 0.117408 ms) goes onto the action that produces it.
constexpr double kSend = 1e-4 + 17408e-9;

TEST(PlannerStepModel, GPipeTimelineComesFromTheSimulator) {
  StepModel model(fixture_request(2, 8));
  const auto p = model.predict(layout("hybrid_parallel pp2 gpipe mb2", 2));
  // Rank 0: F0 [0, 21.117], F1 [21.117, 42.235]; rank 1: F0 [21.117, 52.117], F1 [52.117, 83.117],
  // B0 [83.117, 145.235], B1 [145.235, 207.352]; rank 0: B0 [145.235, 187.235], B1 [207.352,
  // 249.352]. Rank 0 finishes last; then Adam over its 13504 + 2 x 33472 = 80448 elements.
  const double finish = 0.207352224 + 0.042;
  EXPECT_NEAR(p.breakdown.compute, 2 * (0.021 + 0.042), kEps);
  EXPECT_NEAR(p.breakdown.pp_comm, 2 * kSend, kEps);
  EXPECT_NEAR(p.breakdown.bubble, finish - 2 * (0.021 + kSend + 0.042), kEps);
  EXPECT_NEAR(p.breakdown.optimizer, 80448 * 1e-8, kEps);
  EXPECT_NEAR(p.step_seconds, finish + 80448 * 1e-8, kEps);
  EXPECT_EQ(p.breakdown.dp_comm, 0.0);  // dp 1
}

TEST(PlannerStepModel, ZeroBubbleFillsTheCooldownWithWeightGradients) {
  StepModel model(fixture_request(2, 8));
  const auto p = model.predict(layout("hybrid_parallel pp2 zero_bubble mb2", 2));
  // B = W = 21 ms on stage 0, 31 ms on stage 1 (+ the send on B). Rank 1 runs F0 B0 F1 B1 W0 W1
  // from 21.117 ms without a gap and finishes last at 21.117 + 4 x 31 + 2 x 31.117 ms; then Adam
  // over its 3 x 33472 + 778 = 101194 elements.
  const double busy = 4 * 0.031 + 2 * (0.031 + kSend);
  EXPECT_NEAR(p.breakdown.bubble, 0.021 + kSend, kEps);
  EXPECT_NEAR(p.breakdown.compute, 6 * 0.031, kEps);
  EXPECT_NEAR(p.step_seconds, 0.021 + kSend + busy + 101194 * 1e-8, kEps);
}

TEST(PlannerStepModel, DataParallelReductionAfterAPipelineIsExposed) {
  StepModel model(fixture_request(2, 8));
  // pp 1 with 2 microbatches over dp 2: F0 B0 F1 B1 of 2 samples each (half the 4-sample times),
  // then the all-reduce of all gradients (nothing left to hide it behind), then Adam.
  const auto p = model.predict(layout("hybrid_parallel 1f1b mb2", 2));
  EXPECT_NEAR(p.breakdown.compute, 2 * (0.0015 + 5 * 0.015 + 0.0015), kEps);
  EXPECT_NEAR(p.breakdown.dp_comm, 1e-4 + 726568e-9, kEps);
  EXPECT_NEAR(p.breakdown.bubble, 0.0, kEps);
}

TEST(PlannerMemory, ComesFromBoosterPlanMemoryAndFitsAtTheBoundary) {
  auto request = fixture_request(2, 16);
  const auto plan = colo::Booster::plan_memory("torch_ddp", {{"precision", "fp32"}},
                                               StepModel(request).memory_inputs(layout("torch_ddp", 2)));
  const int64_t needed = plan.ranks.front().device_bytes();
  ASSERT_GT(needed, 0);
  const double gib = 1024.0 * 1024.0 * 1024.0;
  for (const int64_t offset : {-1, 0, 1}) {
    request.cluster.device.memory_gib = static_cast<double>(needed + offset) / gib;
    const auto p = StepModel(request).predict(layout("torch_ddp", 2));
    EXPECT_EQ(p.device_bytes, needed);
    EXPECT_EQ(p.fits, offset >= 0) << "usable " << needed + offset << " bytes for " << needed;
    if (offset < 0) {
      EXPECT_NE(p.why_not.find("rank"), std::string::npos) << p.why_not;
    }
  }
}

TEST(PlannerMemory, PipelineStagesHoldWhatTheirScheduleKeepsInFlight) {
  // GPipe keeps both microbatches' activations on stage 0, 1F1B one fewer: the plan differs, the
  // step time does not (same bubble).
  StepModel model(fixture_request(2, 8));
  const auto gpipe = model.predict(layout("hybrid_parallel pp2 gpipe mb2", 2));
  const auto one_f_one_b = model.predict(layout("hybrid_parallel pp2 1f1b mb2", 2));
  EXPECT_GT(gpipe.device_bytes, one_f_one_b.device_bytes);
  EXPECT_NEAR(gpipe.step_seconds, one_f_one_b.step_seconds, kEps);
}

TEST(PlannerSearch, EnumeratesEveryLayoutThePluginsAccept) {
  const auto request = fixture_request(2, 16);
  const auto layouts = colo::planner::enumerate_layouts(request);
  std::map<std::string, int> by_plugin;
  std::set<std::string> names;
  StepModel model(request);
  for (const auto& l : layouts) {
    ++by_plugin[l.plugin];
    EXPECT_TRUE(names.insert(l.name()).second) << "twice: " << l.name();
    EXPECT_EQ(model.structural_problem(l), "") << l.name();
    EXPECT_EQ(Layout::parse(l.name(), 2), l) << l.name();
    EXPECT_FALSE(l.sequence_parallel && l.schedule == "zero_bubble" && l.pipelined());
    EXPECT_NO_THROW(model.memory_plan(l)) << l.name();
  }
  // torch_ddp: accumulation 1, 2, 4, 8 (8 samples per rank) x checkpointing = 8; low_level_zero:
  // x stage 1/2 x offload = 32; gemini: x static, static with offload, auto = 24; hybrid_parallel:
  // dp 2 (7 engine choices: zero 0, zero 1/2/3 without and with offload; x checkpointing, without
  // or with 2/4/8 microbatches) 56, pp 2 (4
  // microbatch counts x GPipe/1F1B/zero bubble/interleaved x checkpointing) 32, tp 2 (sp x
  // checkpointing x none or 2/4/8/16 microbatches) 20.
  EXPECT_EQ(by_plugin["torch_ddp"], 8);
  EXPECT_EQ(by_plugin["low_level_zero"], 32);
  EXPECT_EQ(by_plugin["gemini"], 24);
  EXPECT_EQ(by_plugin["hybrid_parallel"], 108);
  EXPECT_EQ(layouts.size(), 172u);
}

// hybrid_parallel's zero_stage 3: without a pipeline its one pass goes layer by layer, gathering
// each chunk for forward and backward as gemini does; under a pipeline the stage's chunks are
// gathered once a step, ZeRO-2's traffic, while holding less between steps.
TEST(PlannerStepModel, HybridZeroThreeIsPricedAsGeminiAloneAndAsZeroTwoUnderAPipeline) {
  StepModel two(fixture_request(2, 16));
  const auto hybrid = two.predict(layout("hybrid_parallel dp2 zero3", 2));
  const auto gemini = two.predict(layout("gemini dp2 static", 2));
  EXPECT_GT(hybrid.breakdown.dp_comm, 0.0);
  EXPECT_NEAR(hybrid.breakdown.dp_comm, gemini.breakdown.dp_comm, kEps);
  StepModel four(fixture_request(4, 16));
  const auto staged = four.predict(layout("hybrid_parallel dp2 pp2 zero3 1f1b mb4", 4));
  const auto zero2 = four.predict(layout("hybrid_parallel dp2 pp2 zero2 1f1b mb4", 4));
  EXPECT_NEAR(staged.breakdown.dp_comm, zero2.breakdown.dp_comm, kEps);
  EXPECT_EQ(layout("hybrid_parallel dp2 pp2 zero3 1f1b mb4", 4).plugin_options("fp32").at("zero_stage"), "3");
}

TEST(PlannerSearch, RanksByPredictedImagesPerSecond) {
  const auto result = colo::planner::plan_layouts(fixture_request(2, 16));
  ASSERT_FALSE(result.ranked.empty());
  for (std::size_t i = 1; i < result.ranked.size(); ++i) {
    EXPECT_GE(result.ranked[i - 1].images_per_second, result.ranked[i].images_per_second);
  }
  EXPECT_EQ(result.ranked.size() + result.rejected.size(), static_cast<std::size_t>(result.enumerated));
  for (const auto& p : result.ranked) EXPECT_TRUE(p.fits) << p.layout.name();
}

}  // namespace
