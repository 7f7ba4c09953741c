#include <colo/booster/memory_plan.h>
#include <colo/engine/gemini_chunk_owner.h>
#include <colo/engine/parallelize.h>
#include <colo/ddp/bucket_assignment.h>
#include <colo/zero/allocate.h>
#include <colo/zero/shard_layout.h>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

namespace colo {

int64_t RankMemory::device_bytes() const {
  int64_t b = 0;
  for (const auto& p : parts) b += p.on_host ? 0 : p.bytes;
  return b;
}

int64_t RankMemory::host_bytes() const {
  int64_t b = 0;
  for (const auto& p : parts) b += p.on_host ? p.bytes : 0;
  return b;
}

int64_t RankMemory::bytes_of(const std::string& prefix) const {
  int64_t b = 0;
  for (const auto& p : parts) b += p.what.rfind(prefix, 0) == 0 ? p.bytes : 0;
  return b;
}

int64_t MemoryPlan::samples_per_pass(const MemoryPlanInputs& inputs, int dp) {
  return per_rank_batch(inputs.global_batch_size(), dp, inputs.accumulation_steps());
}

std::string MemoryPlan::to_string() const {
  std::string out = fmt::format("memory plan: {}{} on {} rank{}\n", plugin, options.empty() ? "" : " (" + options + ")",
                                world_size, world_size == 1 ? "" : "s");
  constexpr int kWidth = 52;
  for (const auto& rank : ranks) {
    out += fmt::format("rank{} {}{}\n", rank.ranks.find_first_of("-,") == std::string::npos ? "" : "s", rank.ranks,
                       rank.position.empty() ? "" : " (" + rank.position + ")");
    out += fmt::format("  {:<{}} {:>12} {:>12}\n", "", kWidth, "device", "host");
    for (const auto& part : rank.parts) {
      if (part.bytes == 0) continue;
      const auto amount = zero::format_bytes(part.bytes) + (part.estimate ? "~" : "");
      out += fmt::format("  {:<{}} {:>12} {:>12}\n", part.what, kWidth, part.on_host ? "-" : amount,
                         part.on_host ? amount : "-");
    }
    out += fmt::format("  {:<{}} {:>12} {:>12}\n", "total", kWidth, zero::format_bytes(rank.device_bytes()),
                       zero::format_bytes(rank.host_bytes()));
  }
  out += "(~: an estimate; the rest is what colo allocates for model state)\n";
  for (const auto& note : notes) out += "note: " + note + "\n";
  return out;
}

namespace memory_planning {

int64_t bytes(int64_t elements, c10::ScalarType dtype) {
  return elements * static_cast<int64_t>(c10::elementSize(dtype));
}

int64_t activation_bytes(const nn::ModelSummary& model, std::size_t begin, std::size_t end, int64_t samples,
                         amp::Precision precision, bool checkpointing, int tp, bool sequence_parallel,
                         std::vector<std::string>* unknown) {
  const auto per_rank = [&](int64_t elements, int64_t tensor_parallel) {
    if (sequence_parallel) return elements / tp;
    return elements - tensor_parallel + tensor_parallel / tp;
  };
  const bool float8 = precision == amp::Precision::kFp8;
  // Per sample, in bytes: what a layer keeps in the compute dtype and, under fp8, in float8.
  const int64_t element = static_cast<int64_t>(c10::elementSize(amp::to_dtype(precision)));
  const auto kept_bytes = [&](const nn::ActivationFootprint& f) {
    const int64_t own = per_rank(f.kept, f.kept_tensor_parallel);
    if (!float8) return own * element;
    const int64_t own_float8 = per_rank(f.kept_float8, f.kept_float8_tensor_parallel);
    return (own - own_float8) * element + own_float8;
  };
  int64_t kept = 0, widest_recompute = 0, widest_output = 0, weight_copies = 0, widest_recompute_copies = 0;
  for (std::size_t l = begin; l < end && l < model.layers.size(); ++l) {
    const auto& f = model.layers[l].activations;
    if (f.kept < 0) {
      if (unknown) unknown->push_back(model.layers[l].name);
      continue;
    }
    const int64_t own = kept_bytes(f);
    // A layer that tensor parallelism splits (its heads, its hidden units) splits its weights too.
    const int64_t copies = f.kept_tensor_parallel > 0 ? f.float8_weights / tp : f.float8_weights;
    // The first layer's input needs no gradient: it is not recomputed (Layer::run).
    const bool recomputed = checkpointing && l > 0 && model.layers[l - 1].activations.output >= 0;
    if (recomputed) {
      kept += per_rank(model.layers[l - 1].activations.output, 0) * element;
      widest_recompute = std::max(widest_recompute, own);
      if (float8) widest_recompute_copies = std::max(widest_recompute_copies, copies);
    } else {
      kept += own;
    }
    widest_output = std::max(widest_output, f.output);
    // Float8 weight copies: one per pass, kept from its forward to its backward (recomputed
    // layers make theirs again in backward, one layer at a time).
    if (float8 && !recomputed) weight_copies += copies;
  }
  // Backward's own buffers: the gradient flowing in and out of the widest layer.
  const int64_t transient = widest_recompute + 2 * widest_output * element;
  return samples * (kept + transient) + weight_copies + widest_recompute_copies;
}

std::string options_text(const std::map<std::string, std::string>& options) {
  std::string text;
  for (const auto& [key, value] : options) text += fmt::format("{}{}={}", text.empty() ? "" : " ", key, value);
  return text;
}

MemoryPlan data_parallel_plan(const std::string& plugin, const std::map<std::string, std::string>& options,
                              const MemoryPlanInputs& in, std::vector<MemoryPart> parts, amp::Precision precision) {
  const int64_t samples = MemoryPlan::samples_per_pass(in, in.world_size());
  std::vector<std::string> unknown;
  parts.push_back({fmt::format("activations (batch {}{})", samples, in.activation_checkpointing() ? ", checkpointed" : ""),
                   activation_bytes(in.model, 0, in.model.layers.size(), samples, precision, in.activation_checkpointing(), 1,
                                    false, &unknown),
                   false, true});
  MemoryPlan plan;
  plan.plugin = plugin;
  plan.options = options_text(options);
  plan.world_size = in.world_size();
  plan.data_parallel_size = in.world_size();
  RankMemory rank;
  rank.ranks = in.world_size() == 1 ? "0" : fmt::format("0-{}", in.world_size() - 1);
  rank.parts = std::move(parts);
  plan.ranks.push_back(std::move(rank));
  if (!unknown.empty()) {
    plan.notes.push_back(fmt::format("no activation footprint for {} layer(s) (counted as 0), e.g. {}", unknown.size(),
                                     unknown.front()));
  }
  return plan;
}

RankParameters rank_parameters(const nn::ModelSummary& model, std::size_t begin, std::size_t end,
                               const std::function<int64_t(const std::string&, int64_t)>& share) {
  RankParameters out;
  for (std::size_t l = begin; l < end && l < model.layers.size(); ++l) {
    for (const auto& p : model.layers[l].parameters) {
      const int64_t n = share ? share(p.name, p.numel) : p.numel;
      if (p.trainable) {
        out.trainable.push_back(n);
        out.layer_of.push_back(l);
        out.names.push_back(p.name);
      } else {
        out.frozen += n;
      }
    }
  }
  return out;
}

namespace {

int64_t sum(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (auto x : v) s += x;
  return s;
}

int64_t cap_bytes(double mb) { return std::max<int64_t>(1, static_cast<int64_t>(mb * 1024.0 * 1024.0)); }

}  // namespace

std::vector<MemoryPart> replicated_engine_parts(const std::vector<int64_t>& numels, int64_t frozen,
                                                const ReplicatedEngine& e) {
  const auto compute = amp::to_dtype(e.precision);
  const int64_t trainable = sum(numels);
  const bool masters = e.precision != amp::Precision::kFp32 && e.master_weights;
  // The optimizer steps the masters (fp32), or the working weights themselves.
  const auto state_dtype = masters ? torch::kFloat : compute;
  std::vector<MemoryPart> parts;
  parts.push_back({fmt::format("parameters ({})", c10::toString(compute)), bytes(trainable + frozen, compute)});
  parts.push_back({"gradients (all-reduce buckets)", bytes(trainable, compute)});
  if (!e.gradient_as_bucket_view) parts.push_back({"gradients (param.grad, beside the buckets)", bytes(trainable, compute)});
  if (e.communication_dtype && *e.communication_dtype != compute) {
    parts.push_back({"buffers: all-reduce staging", bytes(trainable, *e.communication_dtype)});
  }
  if (masters) parts.push_back({"optimizer state: fp32 masters and their gradients", bytes(2 * trainable, torch::kFloat)});
  parts.push_back({"optimizer state: moments", bytes(static_cast<int64_t>(e.optimizer_states) * trainable, state_dtype)});
  return parts;
}

std::vector<MemoryPart> zero_engine_parts(const std::vector<int64_t>& numels, int64_t frozen, const ZeroEngine& e) {
  const auto compute = amp::to_dtype(e.precision);
  const auto communication = e.communication_dtype.value_or(compute);
  const auto buckets = ddp::assign_buckets(numels, static_cast<int64_t>(c10::elementSize(compute)), cap_bytes(e.bucket_cap_mb));
  const zero::ShardLayout layout(numels, buckets, e.dp);
  int64_t padded = 0, largest_chunk = 0;
  for (std::size_t b = 0; b < layout.num_buckets(); ++b) {
    padded += layout.padded_bucket_numel(b);
    largest_chunk = std::max(largest_chunk, layout.chunk_numel(b));
  }
  const int64_t shard = layout.shard_numel();
  const bool host = e.cpu_offload;
  std::vector<MemoryPart> parts;
  parts.push_back({fmt::format("parameters ({}, gather buckets)", c10::toString(compute)), bytes(padded + frozen, compute)});
  parts.push_back({fmt::format("parameters ({} working shard)", c10::toString(compute)), bytes(shard, compute)});
  parts.push_back({"optimizer state (fp32 master, gradient, moments)",
                   bytes((2 + static_cast<int64_t>(e.optimizer_states)) * shard, torch::kFloat), host && e.device_is_gpu});
  if (e.stage == 1) {
    parts.push_back({"gradients (all-reduce buckets)", bytes(sum(numels), compute)});
  } else {
    int64_t largest_bucket = 0;
    for (std::size_t b = 0; b < layout.num_buckets(); ++b) largest_bucket = std::max(largest_bucket, layout.padded_bucket_numel(b));
    parts.push_back({"buffers: reduce-scatter", 3 * bytes(largest_bucket, communication), false, true});
  }
  if (host && e.device_is_gpu) {
    parts.push_back({"buffers: pinned staging", 4 * (bytes(largest_chunk, compute) + bytes(largest_chunk, communication)),
                     true, true});
  }
  return parts;
}

std::vector<MemoryPart> chunked_engine_parts(const RankParameters& parameters, const ChunkedEngine& e,
                                             int64_t* num_chunks) {
  const auto& numels = parameters.trainable;
  const auto& layer_of = parameters.layer_of;
  const int64_t frozen = parameters.frozen;
  const auto compute = amp::to_dtype(e.precision);
  const auto communication = e.communication_dtype.value_or(compute);
  const auto options = GeminiChunkOptions()
                           .precision(e.precision)
                           .chunk_size_mb(e.chunk_size_mb)
                           .offload_optim_frac(e.cpu_offload ? 1.0 : 0.0);
  const auto chunking = GeminiChunkOwner::plan(numels, parameters.names, options, e.device_is_gpu);
  if (num_chunks) *num_chunks = static_cast<int64_t>(chunking.chunks.size());
  int64_t shards = 0, padded = 0, largest_padded = 0;
  std::map<std::size_t, std::set<std::size_t>> chunks_of_layer;
  for (std::size_t c = 0; c < chunking.chunks.size(); ++c) {
    const int64_t shard = (chunking.chunk_numels[c] + e.dp - 1) / e.dp;
    shards += shard;
    padded += shard * e.dp;
    largest_padded = std::max(largest_padded, shard * e.dp);
    for (auto i : chunking.chunks[c]) chunks_of_layer[layer_of.at(i)].insert(c);
  }
  std::size_t widest = 0;
  for (const auto& [layer, chunks] : chunks_of_layer) widest = std::max(widest, chunks.size());
  // In fp32, a shard on the same side as its master is the master (GeminiChunkOwner shares it);
  // on a CPU both sides are the same memory.
  const bool state_on_host = e.cpu_offload && e.device_is_gpu;
  const bool shard_is_master = compute == torch::kFloat && !state_on_host;
  std::vector<MemoryPart> parts;
  parts.push_back({fmt::format("parameters ({} shards{})", c10::toString(compute), frozen ? ", frozen ones whole" : ""),
                   bytes((shard_is_master ? 0 : shards) + frozen, compute)});
  parts.push_back({"optimizer state (fp32 master, gradient, moments)",
                   bytes((2 + static_cast<int64_t>(e.optimizer_states)) * shards, torch::kFloat), state_on_host});
  const int64_t window = static_cast<int64_t>(widest) + e.max_prefetch;
  parts.push_back({e.pipelined ? "buffers: gathered chunks (the stage's, for a step)" : "buffers: gathered chunks",
                   e.pipelined ? bytes(padded, compute) : window * bytes(largest_padded, compute), false, true});
  if (e.pipelined) parts.push_back({"gradients kept whole for accumulation", bytes(sum(numels), compute), false, true});
  parts.push_back({"buffers: reduce-scatter",
                   3 * (bytes(largest_padded, communication) + bytes(largest_padded / e.dp, communication)), false, true});
  if (state_on_host) {
    parts.push_back({"buffers: pinned staging",
                     4 * (bytes(largest_padded / e.dp, communication) + bytes(largest_padded / e.dp, compute)), true, true});
  }
  return parts;
}

}  // namespace memory_planning
}  // namespace colo
