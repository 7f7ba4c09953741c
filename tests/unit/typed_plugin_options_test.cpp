// The four plugins' typed options (colo/plugins/<name>_options.h, libcolo_plugin_options):
// to_options() writes exactly the keys parse() reads, for the fields that differ from the
// defaults, so that parse(x.to_options()) gives x back field by field; and a plugin built from
// typed options is the plugin the same map builds.
#include <colo/booster/plugin_registry.h>
#include <colo/booster/precision_options.h>
#include <colo/dist/environment.h>
#include <colo/dist/process_group.h>
#include <colo/files/files.h>
#include <colo/pipeline/schedule_registry.h>
#include <colo/pipeline/schedule_text.h>
#include <colo/plugins/gemini_options.h>
#include <colo/plugins/hybrid_parallel_options.h>
#include <colo/shardformer/tensor_parallel_mode.h>
#include <colo/plugins/low_level_zero_options.h>
#include <colo/plugins/torch_ddp_options.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <stdexcept>
#include <tuple>
#include <string>
#include <vector>

#include "temporary_directory.h"
#include "tiny_layer_stack.h"

namespace {

using colo::PluginOptions;
using colo::amp::Precision;

// Values whose shortest decimal text has many digits: a text that loses one does not read back.
const double kThird = 1.0 / 3.0;
const double kTenths = 0.1 + 0.2;  // 0.30000000000000004

// Every loss-scaler field off its default (and valid for the DynamicLossScaler).
colo::amp::LossScalerOptions odd_loss_scaler() {
  return colo::amp::LossScalerOptions()
      .initial_scale(1024.0 + kThird)
      .min_scale(kTenths)
      .max_scale(1048576.0)
      .growth_factor(3.0)
      .backoff_factor(0.25)
      .growth_interval(7)
      .hysteresis(5);
}

void expect_same(const colo::amp::LossScalerOptions& got, const colo::amp::LossScalerOptions& want) {
  EXPECT_EQ(got.initial_scale(), want.initial_scale());
  EXPECT_EQ(got.min_scale(), want.min_scale());
  EXPECT_EQ(got.max_scale(), want.max_scale());
  EXPECT_EQ(got.growth_factor(), want.growth_factor());
  EXPECT_EQ(got.backoff_factor(), want.backoff_factor());
  EXPECT_EQ(got.growth_interval(), want.growth_interval());
  EXPECT_EQ(got.hysteresis(), want.hysteresis());
}

// Delayed float8 scaling with every field off its default.
colo::nn::Fp8Recipe odd_fp8() {
  return colo::nn::Fp8Recipe()
      .scaling(colo::nn::Fp8Scaling::kDelayed)
      .delayed(colo::amp::DelayedScalingOptions().history_length(7).reduction(colo::amp::AmaxReduction::kMostRecent).margin(3));
}

void expect_same(const colo::nn::Fp8Recipe& got, const colo::nn::Fp8Recipe& want) {
  EXPECT_EQ(got.scaling(), want.scaling());
  EXPECT_EQ(got.delayed().history_length(), want.delayed().history_length());
  EXPECT_EQ(got.delayed().reduction(), want.delayed().reduction());
  EXPECT_EQ(got.delayed().margin(), want.delayed().margin());
}

void expect_same(const colo::TorchDdpOptions& got, const colo::TorchDdpOptions& want) {
  EXPECT_EQ(got.bucket_cap_mb(), want.bucket_cap_mb());
  EXPECT_EQ(got.find_unused_parameters(), want.find_unused_parameters());
  EXPECT_EQ(got.gradient_as_bucket_view(), want.gradient_as_bucket_view());
  EXPECT_EQ(got.broadcast_buffers(), want.broadcast_buffers());
  EXPECT_EQ(got.overlap_communication(), want.overlap_communication());
  EXPECT_EQ(got.precision(), want.precision());
  EXPECT_EQ(got.master_weights(), want.master_weights());
  EXPECT_EQ(got.max_grad_norm(), want.max_grad_norm());
  expect_same(got.loss_scaler(), want.loss_scaler());
  expect_same(got.fp8(), want.fp8());
  EXPECT_EQ(got.cuda_graphs(), want.cuda_graphs());
}

void expect_same(const colo::ZeroOptimizerOptions& got, const colo::ZeroOptimizerOptions& want) {
  EXPECT_EQ(got.caller(), want.caller());
  EXPECT_EQ(got.stage(), want.stage());
  EXPECT_EQ(got.precision(), want.precision());
  expect_same(got.loss_scaler(), want.loss_scaler());
  EXPECT_EQ(got.max_grad_norm(), want.max_grad_norm());
  EXPECT_EQ(got.bucket_cap_mb(), want.bucket_cap_mb());
  EXPECT_EQ(got.overlap_communication(), want.overlap_communication());
  EXPECT_EQ(got.cpu_offload(), want.cpu_offload());
  EXPECT_EQ(got.communication_dtype(), want.communication_dtype());
  EXPECT_EQ(got.grad_norm_sum_over().size(), want.grad_norm_sum_over().size());
  EXPECT_EQ(got.tp_group(), want.tp_group());
}

void expect_same(const colo::GeminiOptimizerOptions& got, const colo::GeminiOptimizerOptions& want) {
  EXPECT_EQ(got.caller(), want.caller());
  expect_same(got.loss_scaler(), want.loss_scaler());
  EXPECT_EQ(got.max_grad_norm(), want.max_grad_norm());
}

void expect_same(const colo::GeminiChunkOptions& got, const colo::GeminiChunkOptions& want) {
  EXPECT_EQ(got.caller(), want.caller());
  EXPECT_EQ(got.precision(), want.precision());
  EXPECT_EQ(got.chunk_size_mb(), want.chunk_size_mb());
  EXPECT_EQ(got.placement_policy(), want.placement_policy());
  EXPECT_EQ(got.shard_param_frac(), want.shard_param_frac());
  EXPECT_EQ(got.offload_param_frac(), want.offload_param_frac());
  EXPECT_EQ(got.offload_optim_frac(), want.offload_optim_frac());
  EXPECT_EQ(got.steady_cuda_cap_ratio(), want.steady_cuda_cap_ratio());
  EXPECT_EQ(got.device_memory_bytes(), want.device_memory_bytes());
  EXPECT_EQ(got.max_prefetch(), want.max_prefetch());
  EXPECT_EQ(got.pin_memory(), want.pin_memory());
  EXPECT_EQ(got.overlap_communication(), want.overlap_communication());
  EXPECT_EQ(got.communication_dtype(), want.communication_dtype());
}

void expect_same(const colo::LowLevelZeroOptions& got, const colo::LowLevelZeroOptions& want) {
  expect_same(got.zero(), want.zero());
  expect_same(got.fp8(), want.fp8());
}

void expect_same(const colo::GeminiOptions& got, const colo::GeminiOptions& want) {
  expect_same(got.chunks(), want.chunks());
  expect_same(got.optimizer(), want.optimizer());
  expect_same(got.fp8(), want.fp8());
}

void expect_same(const std::optional<colo::pipeline::Schedule>& got,
                 const std::optional<colo::pipeline::Schedule>& want) {
  ASSERT_EQ(got.has_value(), want.has_value());
  if (!got) return;
  EXPECT_EQ(got->shape.pp(), want->shape.pp());
  EXPECT_EQ(got->shape.microbatches(), want->shape.microbatches());
  EXPECT_EQ(got->shape.chunks(), want->shape.chunks());
  EXPECT_EQ(got->split_backward, want->split_backward);
  EXPECT_EQ(got->forward_only, want->forward_only);
  EXPECT_EQ(got->actions, want->actions);
}

void expect_same(const colo::HybridParallelOptions& got, const colo::HybridParallelOptions& want) {
  expect_same(got.fp8(), want.fp8());
  EXPECT_EQ(got.tp_size(), want.tp_size());
  EXPECT_EQ(got.sequence_parallel(), want.sequence_parallel());
  EXPECT_EQ(got.tp_mode(), want.tp_mode());
  EXPECT_EQ(got.tp_depth(), want.tp_depth());
  EXPECT_EQ(got.pp_size(), want.pp_size());
  EXPECT_EQ(got.num_microbatches(), want.num_microbatches());
  EXPECT_EQ(got.microbatch_size(), want.microbatch_size());
  EXPECT_EQ(got.eval_microbatch_size(), want.eval_microbatch_size());
  EXPECT_EQ(got.pp_style(), want.pp_style());
  EXPECT_EQ(got.pp_schedule_file(), want.pp_schedule_file());
  expect_same(got.schedule_from_file(), want.schedule_from_file());
  EXPECT_EQ(got.num_model_chunks(), want.num_model_chunks());
  EXPECT_EQ(got.partition(), want.partition());
  EXPECT_EQ(got.layers_per_stage(), want.layers_per_stage());
  EXPECT_EQ(got.zero_stage(), want.zero_stage());
  EXPECT_EQ(got.bucket_cap_mb(), want.bucket_cap_mb());
  EXPECT_EQ(got.chunk_size_mb(), want.chunk_size_mb());
  EXPECT_EQ(got.overlap_communication(), want.overlap_communication());
  EXPECT_EQ(got.cpu_offload(), want.cpu_offload());
  EXPECT_EQ(got.communication_dtype(), want.communication_dtype());
  EXPECT_EQ(got.precision(), want.precision());
  EXPECT_EQ(got.max_grad_norm(), want.max_grad_norm());
  expect_same(got.loss_scaler(), want.loss_scaler());
  EXPECT_EQ(got.cuda_graphs(), want.cuda_graphs());
}

// parse(x.to_options()) equals x in every field; returns the map.
template <typename Options>
PluginOptions expect_round_trip(const Options& x) {
  const auto map = x.to_options();
  std::string text;
  for (const auto& [key, value] : map) text += key + "=" + value + " ";
  SCOPED_TRACE("to_options(): " + text);
  try {
    expect_same(Options::parse(map), x);
  } catch (const std::invalid_argument& e) {
    ADD_FAILURE() << "parse refused to_options()'s map: " << e.what();
  }
  return map;
}

// The keys parse() declares, read from its unknown-key error ("valid options: k (default v), ...").
template <typename Options>
std::set<std::string> keys_parse_reads() {
  try {
    Options::parse({{"colo_test_no_such_key", "1"}});
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    const auto listed = message.find("valid options: ");
    EXPECT_NE(listed, std::string::npos) << message;
    std::set<std::string> keys;
    const std::regex entry(R"(([a-z_0-9]+) \(default )");
    const std::string list = message.substr(listed);
    for (std::sregex_iterator it(list.begin(), list.end(), entry), end; it != end; ++it) keys.insert((*it)[1]);
    return keys;
  }
  ADD_FAILURE() << "parse accepted an unknown key";
  return {};
}

// Every key parse() reads, but `without` (keys with no field), is written by one of `maps`: a key
// that to_options() forgets fails here even where no round trip would notice.
void expect_every_key_written(const std::set<std::string>& read, const std::vector<PluginOptions>& maps,
                              const std::set<std::string>& without = {}) {
  std::set<std::string> written;
  for (const auto& map : maps) {
    for (const auto& [key, value] : map) written.insert(key);
  }
  EXPECT_GT(read.size(), 5U);
  for (const auto& key : read) {
    if (without.count(key)) {
      EXPECT_EQ(written.count(key), 0U) << key << " has no field, yet was written";
    } else {
      EXPECT_EQ(written.count(key), 1U) << "to_options() never writes '" << key << "'";
    }
  }
  for (const auto& key : written) EXPECT_EQ(read.count(key), 1U) << "to_options() writes '" << key << "', unread";
}

TEST(TypedPluginOptions, DefaultsWriteNothing) {
  EXPECT_EQ(colo::TorchDdpOptions().to_options(), PluginOptions{});
  EXPECT_EQ(colo::LowLevelZeroOptions().to_options(), PluginOptions{});
  EXPECT_EQ(colo::GeminiOptions().to_options(), PluginOptions{});
  EXPECT_EQ(colo::HybridParallelOptions().to_options(), PluginOptions{});
  EXPECT_EQ(colo::PrecisionOptions().to_options(), PluginOptions{});
}

TEST(TypedPluginOptions, TorchDdpRoundTripsEveryField) {
  const auto x = colo::TorchDdpOptions()
                     .bucket_cap_mb(kThird)
                     .find_unused_parameters(true)
                     .gradient_as_bucket_view(false)
                     .broadcast_buffers(false)
                     .overlap_communication(false)
                     .precision(Precision::kFp16)
                     .master_weights(false)
                     .max_grad_norm(kTenths)
                     .loss_scaler(odd_loss_scaler())
                     .cuda_graphs(true);
  const auto map = expect_round_trip(x);
  // precision=fp8's keys need precision=fp8: a second struct.
  const auto fp8 = expect_round_trip(colo::TorchDdpOptions().precision(Precision::kFp8).fp8(odd_fp8()));
  expect_every_key_written(keys_parse_reads<colo::TorchDdpOptions>(), {map, fp8});
  EXPECT_EQ(fp8.at("fp8_scaling"), "delayed");
  EXPECT_EQ(fp8.at("fp8_amax_compute_algo"), "most_recent");
  EXPECT_EQ(map.at("precision"), "fp16");
  EXPECT_EQ(map.at("growth_interval"), "7");
}

TEST(TypedPluginOptions, LowLevelZeroRoundTripsEveryField) {
  const auto x = colo::LowLevelZeroOptions().zero(colo::LowLevelZeroOptions()
                                                      .zero()
                                                      .stage(2)
                                                      .precision(Precision::kFp16)
                                                      .loss_scaler(odd_loss_scaler())
                                                      .max_grad_norm(kThird)
                                                      .bucket_cap_mb(kTenths)
                                                      .overlap_communication(false)
                                                      .cpu_offload(true)
                                                      .communication_dtype(c10::kFloat));
  const auto map = expect_round_trip(x);
  const auto fp8 = expect_round_trip(
      colo::LowLevelZeroOptions().zero(colo::LowLevelZeroOptions().zero().precision(Precision::kFp8)).fp8(odd_fp8()));
  // cuda_graphs: only its default (false) is valid for low_level_zero.
  expect_every_key_written(keys_parse_reads<colo::LowLevelZeroOptions>(), {map, fp8}, {"cuda_graphs"});
  EXPECT_EQ(map.at("reduce_bucket_size_mb"), "0.30000000000000004");
  EXPECT_EQ(map.at("communication_dtype"), "fp32");
}

TEST(TypedPluginOptions, GeminiRoundTripsEveryField) {
  // Three structs: offload_param_frac needs shard_param_frac=1, auto placement all three
  // fractions at their defaults.
  const auto base = colo::GeminiOptions().chunks();
  const auto fractions = colo::GeminiOptions()
                             .optimizer(colo::GeminiOptimizerOptions(colo::GeminiOptions().optimizer())
                                            .loss_scaler(odd_loss_scaler())
                                            .max_grad_norm(kThird))
                             .chunks(colo::GeminiChunkOptions(base)
                                                          .precision(Precision::kFp16)
                                                          .offload_param_frac(0.25)
                                                          .offload_optim_frac(kTenths)
                                                          .chunk_size_mb(kThird)
                                                          .max_prefetch(5)
                                                          .pin_memory(false)
                                                          .overlap_communication(false)
                                                          .communication_dtype(c10::kHalf));
  const auto partly_sharded = colo::GeminiOptions().chunks(
      colo::GeminiChunkOptions(base).shard_param_frac(0.5).precision(Precision::kBf16));
  // Not a whole number of MiB: device_memory_mb carries a fraction.
  const int64_t device_bytes = (int64_t{3} << 30) + 12345;
  const auto automatic = colo::GeminiOptions().chunks(colo::GeminiChunkOptions(base)
                                                          .placement_policy(colo::GeminiPlacementPolicy::kAuto)
                                                          .steady_cuda_cap_ratio(kTenths)
                                                          .device_memory_bytes(device_bytes)
                                                          .communication_dtype(c10::kBFloat16));
  const auto fp8 =
      colo::GeminiOptions().chunks(colo::GeminiChunkOptions(base).precision(Precision::kFp8)).fp8(odd_fp8());
  std::vector<PluginOptions> maps;
  for (const auto* x : {&fractions, &partly_sharded, &automatic, &fp8}) maps.push_back(expect_round_trip(*x));
  expect_every_key_written(keys_parse_reads<colo::GeminiOptions>(), maps, {"cuda_graphs"});
  EXPECT_EQ(maps[2].at("placement_policy"), "auto");
}

// A 1F1B schedule of 2 ranks and 4 microbatches in a file, as pp_schedule_file takes it.
std::string write_schedule_file(const colo::testing::TemporaryDirectory& dir) {
  const auto path = dir.file("1f1b_pp2_m4.txt");
  const auto schedule =
      colo::pipeline::builtin_schedules().make("1f1b", colo::pipeline::ScheduleShape(/*pp=*/2, /*microbatches=*/4));
  std::ofstream(path) << colo::pipeline::schedule_to_text(schedule);
  return path;
}

TEST(TypedPluginOptions, HybridParallelRoundTripsEveryField) {
  colo::testing::TemporaryDirectory dir;
  const auto file = write_schedule_file(dir);
  // Three structs, as the rules allow: sequence parallelism, ZeRO and offload, an interleaved
  // schedule with explicit layer counts and a microbatch size; a schedule file with CUDA graphs
  // (tp 1, no ZeRO) and the balanced partition; a microbatch count.
  const auto everything = colo::HybridParallelOptions()
                              .tp_size(2)
                              .sequence_parallel(true)
                              .pp_size(2)
                              .microbatch_size(3)
                              .eval_microbatch_size(5)
                              .pp_style("interleaved")
                              .num_model_chunks(2)
                              .partition(colo::pipeline::PartitionMethod::kExplicit)
                              .layers_per_stage({3, 2, 2, 1})
                              .zero_stage(1)
                              .bucket_cap_mb(kThird)
                              .overlap_communication(false)
                              .cpu_offload(true)
                              .communication_dtype(c10::kBFloat16)
                              .precision(Precision::kFp16)
                              .max_grad_norm(kTenths)
                              .loss_scaler(odd_loss_scaler());
  const auto from_file = colo::HybridParallelOptions()
                             .pp_size(2)
                             .pp_schedule_file(file)
                             .schedule_from_file(colo::pipeline::load_schedule_file(file, 2))
                             .num_microbatches(4)
                             .partition(colo::pipeline::PartitionMethod::kBalanced)
                             .cuda_graphs(true);
  const auto counted =
      colo::HybridParallelOptions().pp_size(4).num_microbatches(8).pp_style("gpipe").tp_size(8).tp_mode("2.5d").tp_depth(2);
  // zero_stage 3's chunk size (refused with the other stages).
  const auto chunked = colo::HybridParallelOptions().zero_stage(3).chunk_size_mb(kThird);
  const auto fp8 = colo::HybridParallelOptions().precision(Precision::kFp8).fp8(odd_fp8());
  std::vector<PluginOptions> maps;
  for (const auto* x : {&everything, &from_file, &counted, &chunked, &fp8}) maps.push_back(expect_round_trip(*x));
  expect_every_key_written(keys_parse_reads<colo::HybridParallelOptions>(), maps);

  EXPECT_EQ(maps[0].at("layers_per_stage"), "3,2,2,1");
  EXPECT_EQ(maps[0].count("partition"), 0U) << "layers_per_stage makes the partition explicit";
  // The file is the schedule, its microbatches and chunks: nothing beside it that parse refuses.
  EXPECT_EQ(maps[1],
            (PluginOptions{
                {"pp_size", "2"}, {"pp_schedule_file", file}, {"partition", "balanced"}, {"cuda_graphs", "true"}}));
}

std::string describe(const PluginOptions& options) {
  std::string text;
  for (const auto& [key, value] : options) text += key + "=" + value + " ";
  return text;
}

std::string parse_error(const PluginOptions& options) {
  try {
    colo::HybridParallelOptions::parse(options);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// tp_mode fixes the sizes tp_size may take (q², q² x depth, q³): a size that fits parses, the sizes
// beside it are refused naming the nearest that fit; tp_depth is 2.5d's, and sequence parallelism
// is 1d's (the other modes split the activations already).
TEST(TypedPluginOptions, HybridParallelTensorModesTakeTheSizesTheirGridsHave) {
  struct Case {
    PluginOptions options;
    std::string error;  // empty: parses
  };
  const std::vector<Case> cases = {
      {{{"tp_mode", "2d"}, {"tp_size", "4"}}, ""},
      {{{"tp_mode", "2d"}, {"tp_size", "1"}}, ""},
      {{{"tp_mode", "2d"}, {"tp_size", "3"}}, "tp_mode=2d needs tp_size = q² (a q × q grid), got 3: use 1 or 4"},
      {{{"tp_mode", "2d"}, {"tp_size", "5"}}, "tp_mode=2d needs tp_size = q² (a q × q grid), got 5: use 4 or 9"},
      {{{"tp_mode", "3d"}, {"tp_size", "8"}}, ""},
      {{{"tp_mode", "3d"}, {"tp_size", "4"}}, "tp_mode=3d needs tp_size = q³ (a q × q × q cube), got 4: use 1 or 8"},
      {{{"tp_mode", "3d"}, {"tp_size", "9"}}, "tp_mode=3d needs tp_size = q³ (a q × q × q cube), got 9: use 8 or 27"},
      {{{"tp_mode", "2.5d"}, {"tp_size", "8"}, {"tp_depth", "2"}}, ""},
      {{{"tp_mode", "2.5d"}, {"tp_size", "4"}}, ""},  // depth 1 is 2d
      {{{"tp_mode", "2.5d"}, {"tp_size", "6"}, {"tp_depth", "2"}},
       "tp_mode=2.5d with tp_depth=2 needs tp_size = q² × 2 (2 layers of a q × q grid), got 6: use 2 or 8"},
      {{{"tp_mode", "2.5d"}, {"tp_size", "2"}, {"tp_depth", "4"}},
       "tp_mode=2.5d with tp_depth=4 needs tp_size = q² × 4 (4 layers of a q × q grid), got 2: use 4"},
      {{{"tp_mode", "2.5d"}, {"tp_size", "8"}, {"tp_depth", "0"}}, "tp_depth must be at least 1, got 0"},
      {{{"tp_mode", "2d"}, {"tp_size", "4"}, {"tp_depth", "1"}},
       "tp_depth is tp_mode=2.5d's (layers of the q x q grid); with tp_mode=2d leave it out"},
      {{{"tp_mode", "2d"}, {"tp_size", "4"}, {"enable_sequence_parallelism", "true"}},
       "enable_sequence_parallelism with tp_mode=2d: that mode already splits the activations"},
      {{{"tp_mode", "1d"}, {"tp_size", "6"}, {"enable_sequence_parallelism", "true"}}, ""},
      {{{"tp_mode", "4d"}, {"tp_size", "4"}}, "tp_mode"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(describe(c.options));
    const auto error = parse_error(c.options);
    if (c.error.empty()) {
      EXPECT_EQ(error, "");
    } else {
      EXPECT_NE(error.find(c.error), std::string::npos) << error;
    }
  }
  EXPECT_EQ(colo::tensor_parallel_side("2d", 9, 1), 3);
  EXPECT_EQ(colo::tensor_parallel_side("2.5d", 18, 2), 3);
  EXPECT_EQ(colo::tensor_parallel_side("3d", 27, 1), 3);
  EXPECT_EQ(colo::tensor_parallel_side("1d", 6, 1), 6);
  EXPECT_EQ(colo::tensor_parallel_side("3d", 26, 1), std::nullopt);
}

TEST(TypedPluginOptions, HybridParallelSaysWhatNoKeyHolds) {
  const auto error_of = [](const colo::HybridParallelOptions& x) -> std::string {
    try {
      x.to_options();
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  const auto schedule =
      colo::pipeline::builtin_schedules().make("1f1b", colo::pipeline::ScheduleShape(/*pp=*/2, /*microbatches=*/4));
  EXPECT_NE(
      error_of(colo::HybridParallelOptions().pp_size(2).schedule_from_file(schedule)).find("set pp_schedule_file"),
      std::string::npos);
  EXPECT_NE(error_of(colo::HybridParallelOptions().partition(colo::pipeline::PartitionMethod::kExplicit))
                .find("give layers_per_stage"),
            std::string::npos);
  EXPECT_NE(error_of(colo::HybridParallelOptions().communication_dtype(c10::kDouble)).find("communication_dtype"),
            std::string::npos);
  // A contradiction the user wrote is written as it is, for parse to refuse with its own words.
  const auto both = colo::HybridParallelOptions().pp_size(2).pp_style("gpipe").pp_schedule_file("s.txt");
  try {
    colo::HybridParallelOptions::parse(both.to_options());
    ADD_FAILURE() << "pp_style and pp_schedule_file together were accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("give pp_style or pp_schedule_file, not both"), std::string::npos) << e.what();
  }
}

std::shared_ptr<colo::dist::ProcessGroup> typed_options_world_of_one() {
  const auto path =
      colo::files::join(colo::files::temp_directory(),
                        "colo_typed_options_store_" + std::to_string(::getpid()) + "_" + std::to_string(std::rand()));
  colo::dist::Environment env;
  env.rdzv_file = path;
  colo::dist::ProcessGroup::Options options;
  options.timeout = std::chrono::seconds(10);
  return colo::dist::init_world(env, options);
}

// A plugin made from typed options is the one their map makes: torch_ddp with max_grad_norm clips
// every step as LibTorch's clip_grad_norm_ does (without the option it would not clip at all).
TEST(TypedPluginOptions, BuildAPluginThatUsesThem) {
  const double max_norm = 0.05;  // small enough that every step clips
  auto plugin = colo::PluginRegistry::global().create(colo::TorchDdpOptions().max_grad_norm(max_norm),
                                                      colo::PluginContext(typed_options_world_of_one(), c10::kCPU));
  EXPECT_EQ(plugin->name(), "torch_ddp");
  auto model = colo::test::tiny_layer_stack(7);
  auto optimizer = std::make_shared<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(1e-2));
  colo::Boosted b = plugin->boost({model, optimizer, colo::test::cross_entropy_criterion(), nullptr, nullptr});

  auto reference = colo::test::tiny_layer_stack(7);
  torch::optim::Adam reference_optimizer(reference->parameters(), torch::optim::AdamOptions(1e-2));
  const auto [x, y] = colo::test::tiny_batch();
  for (int step = 0; step < 3; ++step) {
    colo::test::boosted_step(*plugin, b, x, y);
    torch::nn::functional::cross_entropy(reference->forward(x), y).backward();
    torch::nn::utils::clip_grad_norm_(reference->parameters(), max_norm);
    reference_optimizer.step();
    reference_optimizer.zero_grad();
  }
  const auto got = model->parameters();
  const auto want = reference->parameters();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(torch::allclose(got[i], want[i], 1e-5, 1e-6)) << i;
}

// The plugin's own validation, reached through the typed options: one path for code and CLI.
TEST(TypedPluginOptions, ThePluginJudgesThemAsItJudgesTheMap) {
  try {
    colo::PluginRegistry::global().create(colo::LowLevelZeroOptions().zero(colo::LowLevelZeroOptions().zero().stage(3)),
                                          colo::PluginContext{});
    ADD_FAILURE() << "stage 3 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("use the gemini plugin"), std::string::npos) << e.what();
  }
}

}  // namespace
