#include <colo/plugins/hybrid_parallel_options.h>

#include <colo/booster/precision_options.h>
#include <colo/pipeline/schedule_registry.h>
#include <colo/pipeline/schedule_text.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <colo/shardformer/tensor_parallel_mode.h>

#include "communication_dtype.h"

#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>

namespace colo {
namespace {

// "7,5" -> {7, 5}; problems recorded on `in`.
std::vector<int> parse_layer_counts(const std::string& text, OptionReader& in) {
  std::vector<int> counts;
  std::stringstream list(text);
  std::string item;
  while (std::getline(list, item, ',')) {
    try {
      std::size_t used = 0;
      const int value = std::stoi(item, &used);
      if (used != item.size() || value < 1) throw std::invalid_argument(item);
      counts.push_back(value);
    } catch (const std::exception&) {
      in.fail(fmt::format("layers_per_stage must be a comma-separated list of positive layer counts, one per stage "
                          "(e.g. 7,5); '{}' is not a positive whole number",
                          item));
      return {};
    }
  }
  return counts;
}

// The schedules that run several model chunks per rank.
std::vector<std::string> chunked_schedules() {
  std::vector<std::string> names;
  for (const auto& entry : pipeline::builtin_schedules().entries()) {
    if (entry.supports_chunks) names.push_back(entry.name);
  }
  return names;
}

// pp_schedule_file: the schedule it holds, for pp_size ranks and num_microbatches (when given),
// and the microbatches and chunks it sets. Each problem names the file and the line.
void read_schedule_file(HybridParallelOptions& o, const PluginOptions& given, OptionReader& in) {
  const auto& path = o.pp_schedule_file();
  if (given.count("pp_style")) {
    in.fail(fmt::format("give pp_style or pp_schedule_file, not both: the file ({}) is the schedule", path));
  }
  if (o.microbatch_size() > 0) {
    in.fail(fmt::format("pp_schedule_file={} fixes the microbatches per step: give num_microbatches (or leave it to "
                        "the file), not microbatch_size",
                        path));
    return;
  }
  if (o.pp_size() < 1 || o.num_microbatches() < 0) return;  // refused on their own
  try {
    o.schedule_from_file(pipeline::load_schedule_file(path, o.pp_size(), static_cast<int>(o.num_microbatches())));
  } catch (const std::invalid_argument& e) {
    in.fail(fmt::format("pp_schedule_file: {}", e.what()));
    return;
  }
  const auto& shape = o.schedule_from_file()->shape;
  if (given.count("num_model_chunks") && o.num_model_chunks() != shape.chunks()) {
    in.fail(fmt::format("num_model_chunks={}, but pp_schedule_file={} runs {} model chunk{} per rank (stages 0 to {} "
                        "over pp_size={}): leave num_model_chunks out, or match it",
                        o.num_model_chunks(), path, shape.chunks(), shape.chunks() == 1 ? "" : "s",
                        shape.num_stages() - 1, o.pp_size()));
  }
  o.num_model_chunks(shape.chunks());
  o.num_microbatches(shape.microbatches());
}

}  // namespace

HybridParallelOptions HybridParallelOptions::parse(const PluginOptions& given) {
  OptionReader in("hybrid_parallel", given);
  HybridParallelOptions o;
  o.tp_size(static_cast<int>(
      in.get_int("tp_size", 1, "tensor-parallel size: the shardformer splits every block's linears over this many ranks")));
  o.tp_mode(in.get_choice("tp_mode", "1d", tensor_parallel_modes(),
                          "how the tp ranks split the layers: 1d (Megatron), 2d (tp_size = q²), 2.5d (q² x tp_depth), "
                          "3d (q³)"));
  o.tp_depth(static_cast<int>(in.get_int("tp_depth", 1, "tp_mode=2.5d: layers of the q x q grid")));
  o.pp_size(static_cast<int>(in.get_int("pp_size", 1, "pipeline stages; the data-parallel size is what the world leaves")));
  o.num_microbatches(in.get_int("num_microbatches", 0, "microbatches per step (or give microbatch_size)"));
  o.microbatch_size(in.get_int("microbatch_size", 0, "samples per microbatch (or give num_microbatches)"));
  o.eval_microbatch_size(in.get_int("eval_microbatch_size", 0,
                                    "samples per microbatch of a forward-only pass (evaluation); 0: the batch in "
                                    "2 x pp_size microbatches"));
  const auto& schedules = pipeline::builtin_schedules();
  o.pp_style(in.get_choice("pp_style", "1f1b", schedules.names(), "pipeline schedule"));
  o.pp_schedule_file(in.get_string("pp_schedule_file", "",
                                   "a file of each pipeline rank's actions (one line per rank, e.g. 0F0,0F1,0B0,...) "
                                   "to train with instead of a pp_style; it sets num_microbatches and "
                                   "num_model_chunks"));
  o.num_model_chunks(static_cast<int>(
      in.get_int("num_model_chunks", 1,
                 fmt::format("model chunks (virtual stages) per rank; above 1 with pp_style={}",
                             fmt::join(chunked_schedules(), "|")))));
  const auto partition =
      in.get_choice("partition", "uniform", {"uniform", "balanced"},
                    "how layers are cut into stages: uniform by layer count, balanced by parameter count");
  o.partition(pipeline::parse_partition_method(partition));
  const auto counts = in.get_string("layers_per_stage", "",
                                    "explicit layers per virtual stage, e.g. 7,5 (the patch embedding counts as a "
                                    "layer; the head goes with the last block)");
  if (!counts.empty()) {
    o.layers_per_stage(parse_layer_counts(counts, in));
    o.partition(pipeline::PartitionMethod::kExplicit);
    if (given.count("partition")) in.fail("give either layers_per_stage or partition, not both");
  }
  o.zero_stage(static_cast<int>(
      in.get_int("zero_stage", 0, "data-parallel axis: 0 all-reduce, 1 ZeRO-1, 2 ZeRO-2, 3 ZeRO-3 in gemini's chunks (with the pipeline and "
                     "tensor parallelism too)")));
  o.bucket_cap_mb(in.get_mebibytes("bucket_cap_mb", 25.0, "MiB of gradients per data-parallel reduction bucket",
                                   /*zero_allowed=*/false));
  const auto chunk_mb = in.get_mebibytes("chunk_size_mb", 0.0,
                                         "zero_stage 3: MiB of parameters (in the compute dtype) per chunk; 0: searched "
                                         "from the layer sizes",
                                         /*zero_allowed=*/true);
  if (chunk_mb > 0.0) o.chunk_size_mb(chunk_mb);
  o.overlap_communication(in.get_bool("overlap_communication", true,
                                      "ZeRO: gather updated weights during the next step (DDP without pipeline: reduce "
                                      "during backward)"));
  o.cpu_offload(in.get_bool("cpu_offload", false, "ZeRO: fp32 masters, optimizer state and step on the CPU"));
  if (const auto communication = detail::read_communication_dtype(in)) o.communication_dtype(communication);
  const auto precision = PrecisionOptions::read(in, given);
  o.precision(precision.precision());
  o.max_grad_norm(precision.max_grad_norm());
  o.loss_scaler(precision.loss_scaler());
  o.fp8(precision.fp8());
  o.sequence_parallel(in.get_bool("enable_sequence_parallelism", false,
                                   "LayerNorm, dropout and residuals on 1/tp of the tokens (with tp_size > 1)"));
  o.cuda_graphs(in.get_bool("cuda_graphs", false,
                            "replay each microbatch's forward and backward as CUDA graphs (tp_size 1, zero_stage 0, "
                            "not zero_bubble)"));

  // Rules that tie options together; each problem once, all of them reported.
  if (o.sequence_parallel() && o.tp_size() <= 1) {
    in.fail("enable_sequence_parallelism needs tp_size > 1 (it splits the tokens over the tensor-parallel ranks)");
  }
  // The schedule: pp_style's rules, or the file read and run dry (it sets the microbatches and
  // the chunks, so it comes before the rules that read them).
  if (!o.pp_schedule_file().empty()) {
    read_schedule_file(o, given, in);
  } else if (o.pp_size() >= 1 && o.num_model_chunks() >= 1) {
    pipeline::ScheduleShape shape(o.pp_size(), o.num_microbatches() > 0 ? static_cast<int>(o.num_microbatches()) : o.pp_size());
    shape.chunks(o.num_model_chunks());
    for (const auto& problem : schedules.shape_problems(o.pp_style(), shape)) {
      // Without num_microbatches the count is known only per batch: its rule is checked then.
      if (o.num_microbatches() == 0 && problem.find("microbatches") != std::string::npos) continue;
      in.fail(fmt::format("pp_style={}, pp_size={}, num_model_chunks={}: {}", o.pp_style(), o.pp_size(),
                          o.num_model_chunks(), problem));
    }
  } else if (o.num_model_chunks() < 1) {
    in.fail(fmt::format("num_model_chunks must be at least 1, got {}", o.num_model_chunks()));
  }
  // How the options name the schedule in the rules below.
  const bool from_file = o.schedule_from_file().has_value();
  const std::string split_schedule =
      from_file ? fmt::format("pp_schedule_file={} (its W actions split the backward)", o.pp_schedule_file())
                : "pp_style=" + o.pp_style();
  if (o.sequence_parallel() && o.splits_backward()) {
    in.fail(fmt::format("enable_sequence_parallelism with {} is not supported yet (the deferred weight gradients of the "
                        "sequence-parallel LayerNorms would miss their tensor-parallel sum); use {}",
                        split_schedule, from_file ? "a schedule without W actions" : "1f1b or interleaved"));
  }
  if (o.cuda_graphs()) {
    // Each rule says what a graph replay cannot do there. Several pipeline stages, chunks and
    // data-parallel ranks are fine: a stage keeps a capture slot per microbatch its schedule
    // holds, and the data-parallel reduction runs after the backward graphs.
    if (o.tp_size() > 1) {
      in.fail(fmt::format("cuda_graphs with tp_size={} is not implemented yet (the tensor-parallel collectives run "
                          "inside the layers); use tp_size=1 or cuda_graphs=false",
                          o.tp_size()));
    }
    if (o.zero_stage() > 0) {
      in.fail(fmt::format("cuda_graphs with zero_stage={} is not implemented yet (ZeRO's gradient hooks do not fire "
                          "in a graph replay); use zero_stage=0 or cuda_graphs=false",
                          o.zero_stage()));
    }
    if (o.splits_backward()) {
      in.fail(fmt::format("cuda_graphs with {} is not implemented (its B computes the input gradient alone and defers "
                          "the weight gradient to a later W; a backward graph computes both at once); use {}, or "
                          "cuda_graphs=false",
                          split_schedule,
                          from_file ? "a schedule without W actions" : "pp_style=1f1b, gpipe or interleaved"));
    }
  }
  if (o.tp_size() < 1) {
    in.fail(fmt::format("tp_size must be at least 1, got {}", o.tp_size()));
  } else if (auto problem = tensor_parallel_size_problem(o.tp_mode(), o.tp_size(), o.tp_depth())) {
    in.fail(*problem);
  }
  if (given.count("tp_depth") && o.tp_mode() != "2.5d") {
    in.fail(fmt::format("tp_depth is tp_mode=2.5d's (layers of the q x q grid); with tp_mode={} leave it out",
                        o.tp_mode()));
  }
  if (o.sequence_parallel() && o.tp_mode() != "1d") {
    in.fail(fmt::format("enable_sequence_parallelism with tp_mode={}: that mode already splits the activations over "
                        "the tp ranks (tokens and features); leave sequence parallelism out, or use tp_mode=1d",
                        o.tp_mode()));
  }
  // Only 1D's parallel linears multiply in float8; the grid modes' products would stay bf16 while
  // the run reported fp8, so say so instead.
  if (o.precision() == amp::Precision::kFp8 && o.tp_mode() != "1d") {
    in.fail(fmt::format("precision=fp8 with tp_mode={}: that mode's products have no float8 path (only tp_mode=1d's "
                        "parallel linears multiply in float8); use tp_mode=1d, or precision=bf16",
                        o.tp_mode()));
  }
  if (o.pp_size() < 1) in.fail(fmt::format("pp_size must be at least 1, got {}", o.pp_size()));
  if (o.num_microbatches() < 0) in.fail(fmt::format("num_microbatches must be positive, got {}", o.num_microbatches()));
  if (o.microbatch_size() < 0) in.fail(fmt::format("microbatch_size must be positive, got {}", o.microbatch_size()));
  if (o.eval_microbatch_size() < 0) {
    in.fail(fmt::format("eval_microbatch_size must be positive (or 0: the batch in 2 x pp_size microbatches), got {}",
                        o.eval_microbatch_size()));
  }
  if (o.num_microbatches() > 0 && o.microbatch_size() > 0) {
    in.fail("give num_microbatches or microbatch_size, not both");
  }
  // (A schedule file sets num_microbatches; one that could not be read is refused already.)
  if (o.pp_size() > 1 && o.num_microbatches() == 0 && o.microbatch_size() == 0 && o.pp_schedule_file().empty()) {
    in.fail(fmt::format("pp_size={} needs num_microbatches or microbatch_size (the pipeline splits each batch into "
                        "microbatches; e.g. num_microbatches={})",
                        o.pp_size(), 2 * o.pp_size()));
  }
  if (o.zero_stage() < 0 || o.zero_stage() > 3) {
    in.fail(fmt::format("zero_stage must be 0, 1, 2 or 3 (gemini's chunks), got {}", o.zero_stage()));
  }
  if (o.cpu_offload() && o.zero_stage() == 0) in.fail("cpu_offload needs zero_stage 1, 2 or 3");
  if (o.chunk_size_mb() && o.zero_stage() != 3) {
    in.fail(fmt::format("chunk_size_mb sizes zero_stage 3's chunks; with zero_stage={} leave it out (bucket_cap_mb "
                        "sizes the buckets of the other stages)",
                        o.zero_stage()));
  }
  in.finish();
  return o;
}

PluginOptions HybridParallelOptions::to_options() const {
  const HybridParallelOptions d;
  OptionWriter out;
  out.set_int("tp_size", tp_size(), d.tp_size());
  out.set_bool("enable_sequence_parallelism", sequence_parallel(), d.sequence_parallel());
  out.set_string("tp_mode", tp_mode(), d.tp_mode());
  out.set_int("tp_depth", tp_depth(), d.tp_depth());
  out.set_int("pp_size", pp_size(), d.pp_size());
  out.set_int("microbatch_size", microbatch_size(), d.microbatch_size());
  out.set_int("eval_microbatch_size", eval_microbatch_size(), d.eval_microbatch_size());
  out.set_string("pp_style", pp_style(), d.pp_style());
  out.set_string("pp_schedule_file", pp_schedule_file(), d.pp_schedule_file());
  // A schedule file's chunks and microbatches are the file's: written only where they differ
  // from it (for parse to report).
  const auto* file_shape = schedule_from_file() ? &schedule_from_file()->shape : nullptr;
  if (file_shape && pp_schedule_file().empty()) {
    throw std::invalid_argument("HybridParallelOptions: schedule_from_file has no option key (parse reads it from "
                                "pp_schedule_file): set pp_schedule_file to the schedule's file instead");
  }
  out.set_int("num_microbatches", num_microbatches(), file_shape ? file_shape->microbatches() : d.num_microbatches());
  out.set_int("num_model_chunks", num_model_chunks(), file_shape ? file_shape->chunks() : d.num_model_chunks());
  // layers_per_stage makes the partition explicit; uniform and balanced are partition's.
  out.set_string("layers_per_stage", fmt::format("{}", fmt::join(layers_per_stage(), ",")), "");
  if (partition() == pipeline::PartitionMethod::kExplicit) {
    if (layers_per_stage().empty()) {
      throw std::invalid_argument(
          "HybridParallelOptions: partition kExplicit has no option value: give layers_per_stage (the explicit "
          "layer counts), which makes the partition explicit");
    }
  } else {
    out.set_string("partition", pipeline::to_string(partition()), pipeline::to_string(d.partition()));
  }
  out.set_int("zero_stage", zero_stage(), d.zero_stage());
  out.set_double("bucket_cap_mb", bucket_cap_mb(), d.bucket_cap_mb());
  out.set_double("chunk_size_mb", chunk_size_mb());
  out.set_bool("overlap_communication", overlap_communication(), d.overlap_communication());
  out.set_bool("cpu_offload", cpu_offload(), d.cpu_offload());
  detail::write_communication_dtype(out, communication_dtype(), "hybrid_parallel");
  out.merge(
      PrecisionOptions().precision(precision()).max_grad_norm(max_grad_norm()).loss_scaler(loss_scaler()).fp8(fp8()).to_options());
  out.set_bool("cuda_graphs", cuda_graphs(), d.cuda_graphs());
  return out.options();
}

pipeline::Schedule HybridParallelOptions::training_schedule(int microbatches) const {
  if (!schedule_from_file_) {
    return pipeline::builtin_schedules().make(
        pp_style_, pipeline::ScheduleShape(pp_size_, microbatches).chunks(num_model_chunks_));
  }
  if (microbatches != schedule_from_file_->shape.microbatches()) {
    throw std::invalid_argument(fmt::format("pp_schedule_file={} is a schedule of {} microbatches, not {}",
                                            pp_schedule_file_, schedule_from_file_->shape.microbatches(),
                                            microbatches));
  }
  return *schedule_from_file_;
}

bool HybridParallelOptions::splits_backward() const {
  if (schedule_from_file_) return schedule_from_file_->split_backward;
  const auto* entry = pipeline::builtin_schedules().find(pp_style_);
  return entry && entry->splits_backward;
}

}  // namespace colo
