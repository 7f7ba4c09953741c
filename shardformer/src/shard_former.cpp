// ShardFormer executes a policy's table (policy.h, shard_plan.h): Colossal-AI's ModelSharder and
// torchtitan's parallelize_module, over a LayerStack.
#include <colo/dist/process_group.h>
#include <colo/nn/layer_stack.h>
#include <colo/nn/model_summary.h>
#include <colo/shardformer/parallel_linear.h>
#include <colo/shardformer/policy_registry.h>
#include <colo/shardformer/rng_tracker.h>
#include <colo/shardformer/shard_former.h>
#include <colo/shardformer/vit_policy.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>
#include <stdexcept>

namespace colo::shardformer {
namespace {

// The sub-module at `path` inside `layer`, or null.
std::shared_ptr<torch::nn::Module> find_submodule(const nn::Layer& layer, const std::string& path) {
  for (const auto& item : layer.named_modules("", /*include_self=*/false)) {
    if (item.key() == path) return item.value();
  }
  return nullptr;
}

// A sub-module's own weight and bias (undefined when it has none).
std::pair<torch::Tensor, torch::Tensor> weight_and_bias(const torch::nn::Module& module) {
  torch::Tensor weight, bias;
  for (const auto& item : module.named_parameters(/*recurse=*/false)) {
    if (item.key() == "weight") weight = item.value();
    if (item.key() == "bias") bias = item.value();
  }
  return {weight, bias};
}

std::string joined_or_none(const std::vector<std::string>& paths) {
  return paths.empty() ? "none" : fmt::format("{}", fmt::join(paths, ", "));
}

// What the table asks of a model in memory: each row names, once, a sub-module of its layer type
// that the layer lets be replaced and that is a linear layer, with options its kind takes. Only
// the first layer of each type with a problem is reported (the others share its structure).
std::vector<std::string> table_problems(const Policy& policy, const ShardPlan& plan, const nn::LayerStack& model,
                                        const nn::ModelSummary& summary) {
  std::vector<std::string> found;
  std::set<const LayerPlan*> reported;
  for (std::size_t k = 0; k < model.size(); ++k) {
    const auto& layer = *model.layer(k);
    const auto* entry = plan_of(plan, layer);
    if (!entry || reported.count(entry)) continue;
    const auto before = found.size();
    const auto replaceable = layer.replaceable_submodules();
    std::set<std::string> seen;
    for (const auto& row : entry->splits) {
      const auto where = fmt::format("the '{}' policy's table: layer {} ({}), sub-module '{}'", policy.name(),
                                     summary.layers[k].name, entry->layer_type, row.suffix);
      if (!seen.insert(row.suffix).second) {
        found.push_back(where + ": named twice");
        continue;
      }
      if (row.kind == Split::kRow && (row.options.parts() != 1 || row.options.gather_output())) {
        found.push_back(where + ": a Row split takes neither parts nor gather_output");
      }
      const auto module = find_submodule(layer, row.suffix);
      if (!module) {
        found.push_back(fmt::format("{}: the layer has no such sub-module (it lets a policy replace: {})", where,
                                    joined_or_none(replaceable)));
        continue;
      }
      if (std::find(replaceable.begin(), replaceable.end(), row.suffix) == replaceable.end()) {
        found.push_back(fmt::format(
            "{}: the layer does not let it be replaced (it lets: {}); list it in the layer's "
            "nn::Layer::replaceable_submodules and replace_submodule",
            where, joined_or_none(replaceable)));
      }
      const auto weight = weight_and_bias(*module).first;
      if (!weight.defined() || weight.dim() != 2) found.push_back(where + ": not a linear layer (no [out, in] weight)");
    }
    if (found.size() > before) reported.insert(entry);
  }
  return found;
}

// The table's shape checks on a model in memory: its layers matched by type, their shapes read
// from the summary (the same check a memory plan makes, shard_plan.h).
std::vector<std::string> model_shape_problems(const ShardPlan& plan, const nn::LayerStack& model,
                                              const nn::ModelSummary& summary, int64_t tp_size) {
  std::vector<std::string> found;
  std::set<const LayerPlan*> reported;
  for (std::size_t k = 0; k < model.size(); ++k) {
    const auto* entry = plan_of(plan, *model.layer(k));
    if (!entry || reported.count(entry)) continue;
    auto problems = shape_problems(*entry, summary.layers[k], tp_size);
    if (problems.empty()) continue;
    reported.insert(entry);
    found.insert(found.end(), problems.begin(), problems.end());
  }
  return found;
}

// Executes one layer's rows: each sub-module's weight and bias become this rank's pieces inside
// the parallel linear that replaces it, and the parameters the row splits get their ShardSpec.
void split_layer(nn::Layer& layer, const LayerPlan& entry, const ShardContext& context) {
  for (const auto& row : entry.splits) {
    const auto [weight, bias] = weight_and_bias(*find_submodule(layer, row.suffix));
    auto options = row.options;
    if (row.kind == Split::kFusedQkv) options.parts(3);
    options.sequence_tokens(context.sequence_tokens);
    torch::nn::AnyModule replacement;
    nn::ShardSpec spec;
    if (row.kind == Split::kRow) {
      RowParallelLinear linear(weight, bias, context.tp, options);
      spec = linear->spec();
      replacement = torch::nn::AnyModule(linear);
    } else {
      ColumnParallelLinear linear(weight, bias, context.tp, options);
      spec = linear->spec();
      replacement = torch::nn::AnyModule(linear);
    }
    layer.replace_submodule(row.suffix, std::move(replacement));
    const auto held = layer.named_parameters(/*recurse=*/true);
    for (const auto& name : split_parameter_names(row)) {
      if (held.contains(name)) layer.set_shard_spec(name, spec);
    }
  }
}

}  // namespace

ShardFormer::ShardFormer(std::shared_ptr<dist::ProcessGroup> tp, ShardFormerOptions options)
    : tp_(std::move(tp)), options_(options) {
  if (!tp_) throw std::invalid_argument("ShardFormer: the tensor-parallel group is null");
  // The program's own policies first: they may know a model better than a built-in one.
  policies_ = PolicyRegistry::global().policies();
  policies_.push_back(std::make_shared<VitPolicy>());
}

void ShardFormer::add_policy(std::shared_ptr<Policy> policy) {
  if (!policy) throw std::invalid_argument("ShardFormer::add_policy: the policy is null");
  // A user's policy goes first: it may know a model better than a built-in one.
  policies_.insert(policies_.begin(), std::move(policy));
}

const Policy& ShardFormer::policy_for(const nn::LayerStack& model) const {
  std::vector<std::string> names;
  for (const auto& policy : policies_) {
    if (policy->matches(model)) return *policy;
    names.push_back(policy->name());
  }
  throw std::invalid_argument(fmt::format(
      "tensor parallelism: no shardformer policy knows this model (policies: {}); write one for its layers "
      "(colo::shardformer::Policy: docs/adding_a_model_policy.md) and add it with PolicyRegistry::global().add "
      "(or ShardFormer::add_policy), or use tp_size=1",
      fmt::join(names, ", ")));
}

std::vector<std::string> ShardFormer::problems(const nn::LayerStack& model) const {
  const Policy* policy = nullptr;
  try {
    policy = &policy_for(model);
  } catch (const std::invalid_argument& e) {
    return {e.what()};
  }
  const bool sequence = options_.sequence_parallel() && tp_->size() > 1;
  const auto plan = policy->plan();
  const auto summary = nn::summarize(model);
  // The policy's own words first; the table's checks make sure that no split fails halfway.
  auto found = policy->problems(model, tp_->size(), options_.sequence_parallel());
  const bool own = !found.empty();
  const auto table = table_problems(*policy, plan, model, summary);
  found.insert(found.end(), table.begin(), table.end());
  if (own) return found;
  if (sequence) {
    try {
      policy->sequence_tokens(model);
    } catch (const std::invalid_argument& e) {
      found.emplace_back(e.what());
    }
  }
  if (table.empty()) {
    const auto shapes = model_shape_problems(plan, model, summary, tp_->size());
    found.insert(found.end(), shapes.begin(), shapes.end());
  }
  return found;
}

void check_problems(const std::vector<std::string>& problems, int64_t tp_size) {
  if (problems.empty()) return;
  throw std::invalid_argument(fmt::format("tensor parallelism over {} ranks: {}", tp_size, fmt::join(problems, "; ")));
}

void ShardFormer::shard(nn::LayerStack& model) const {
  check_problems(problems(model), tp_->size());
  const auto& policy = policy_for(model);
  ShardContext context;
  context.tp = tp_;
  context.sequence_parallel = options_.sequence_parallel() && tp_->size() > 1;
  if (context.sequence_parallel) context.sequence_tokens = policy.sequence_tokens(model);
  if (tp_->size() > 1) context.sharded_rng = std::make_shared<RngTracker>(options_.seed(), tp_->rank(), options_.device());
  const auto plan = policy.plan();
  for (const auto& layer : model.layers()) {
    if (const auto* entry = plan_of(plan, *layer)) split_layer(*layer, *entry, context);
  }
  policy.add_mappings(model, context);
}

}  // namespace colo::shardformer
