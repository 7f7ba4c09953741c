#include "hybrid_parallel_options.h"

#include <colo/booster/precision_options.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>

namespace colo::plugins {
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

}  // namespace

HybridParallelOptions HybridParallelOptions::parse(const PluginOptions& given) {
  OptionReader in("hybrid_parallel", given);
  HybridParallelOptions o;
  o.tp_size(static_cast<int>(
      in.get_int("tp_size", 1, "tensor-parallel size: the shardformer splits every block's linears over this many ranks")));
  o.pp_size(static_cast<int>(in.get_int("pp_size", 1, "pipeline stages; the data-parallel size is what the world leaves")));
  o.num_microbatches(in.get_int("num_microbatches", 0, "microbatches per step (or give microbatch_size)"));
  o.microbatch_size(in.get_int("microbatch_size", 0, "samples per microbatch (or give num_microbatches)"));
  o.eval_microbatch_size(in.get_int("eval_microbatch_size", 0,
                                    "samples per microbatch of a forward-only pass (evaluation); 0: the batch in "
                                    "2 x pp_size microbatches"));
  const auto style = in.get_choice("pp_style", "1f1b", {"gpipe", "1f1b", "interleaved", "zero_bubble"},
                                   "pipeline schedule");
  o.pp_style(pipeline::parse_schedule_style(style));
  o.num_model_chunks(static_cast<int>(
      in.get_int("num_model_chunks", 1, "model chunks (virtual stages) per rank; above 1 with pp_style=interleaved")));
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
      in.get_int("zero_stage", 0, "data-parallel axis: 0 all-reduce, 1 ZeRO-1, 2 ZeRO-2 (with the pipeline too)")));
  o.bucket_cap_mb(in.get_mebibytes("bucket_cap_mb", 25.0, "MiB of gradients per data-parallel reduction bucket",
                                   /*zero_allowed=*/false));
  o.overlap_communication(in.get_bool("overlap_communication", true,
                                      "ZeRO: gather updated weights during the next step (DDP without pipeline: reduce "
                                      "during backward)"));
  o.cpu_offload(in.get_bool("cpu_offload", false, "ZeRO: fp32 masters, optimizer state and step on the CPU"));
  const auto communication = in.get_choice("communication_dtype", "auto", {"auto", "fp32", "fp16", "bf16"},
                                           "dtype gradients are reduced in; auto: the precision's");
  if (communication != "auto") o.communication_dtype(amp::to_dtype(amp::parse_precision(communication)));
  const auto precision = PrecisionOptions::read(in, given);
  o.precision(precision.precision);
  o.max_grad_norm(precision.max_grad_norm);
  o.loss_scaler(precision.loss_scaler);
  o.sequence_parallel(in.get_bool("enable_sequence_parallelism", false,
                                   "LayerNorm, dropout and residuals on 1/tp of the tokens (with tp_size > 1)"));
  o.cuda_graphs(in.get_bool("cuda_graphs", false,
                            "replay each microbatch's forward and backward as CUDA graphs (tp_size 1, zero_stage 0, "
                            "not zero_bubble)"));

  // Rules that tie options together; each problem once, all of them reported.
  if (o.sequence_parallel() && o.tp_size() <= 1) {
    in.fail("enable_sequence_parallelism needs tp_size > 1 (it splits the tokens over the tensor-parallel ranks)");
  }
  if (o.sequence_parallel() && o.pp_style() == pipeline::ScheduleStyle::kZeroBubble) {
    in.fail("enable_sequence_parallelism with pp_style=zero_bubble is not supported yet (the deferred weight gradients "
            "of the sequence-parallel LayerNorms would miss their tensor-parallel sum); use 1f1b or interleaved");
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
    if (o.pp_style() == pipeline::ScheduleStyle::kZeroBubble) {
      in.fail("cuda_graphs with pp_style=zero_bubble is not implemented (its B computes the input gradient alone and "
              "defers the weight gradient to a later W; a backward graph computes both at once); use pp_style=1f1b, "
              "gpipe or interleaved, or cuda_graphs=false");
    }
  }
  if (o.tp_size() < 1) in.fail(fmt::format("tp_size must be at least 1, got {}", o.tp_size()));
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
  if (o.pp_size() > 1 && o.num_microbatches() == 0 && o.microbatch_size() == 0) {
    in.fail(fmt::format("pp_size={} needs num_microbatches or microbatch_size (the pipeline splits each batch into "
                        "microbatches; e.g. num_microbatches={})",
                        o.pp_size(), 2 * o.pp_size()));
  }
  if (o.zero_stage() < 0 || o.zero_stage() > 2) {
    in.fail(fmt::format("zero_stage must be 0, 1 or 2, got {}{}", o.zero_stage(),
                        o.zero_stage() == 3 ? " (ZeRO-3 is the gemini plugin's)" : ""));
  }
  if (o.cpu_offload() && o.zero_stage() == 0) in.fail("cpu_offload needs zero_stage 1 or 2");
  if (o.pp_size() >= 1 && o.num_model_chunks() >= 1) {
    pipeline::ScheduleShape shape(o.pp_size(), o.num_microbatches() > 0 ? static_cast<int>(o.num_microbatches()) : o.pp_size());
    shape.chunks(o.num_model_chunks());
    for (const auto& problem : pipeline::shape_problems(o.pp_style(), shape)) {
      // Without num_microbatches the count is known only per batch: its rule is checked then.
      if (o.num_microbatches() == 0 && problem.find("microbatches") != std::string::npos) continue;
      in.fail(fmt::format("pp_style={}, pp_size={}, num_model_chunks={}: {}", style, o.pp_size(), o.num_model_chunks(),
                          problem));
    }
  } else if (o.num_model_chunks() < 1) {
    in.fail(fmt::format("num_model_chunks must be at least 1, got {}", o.num_model_chunks()));
  }
  in.finish();
  return o;
}

}  // namespace colo::plugins
