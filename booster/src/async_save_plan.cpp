// The host memory an asynchronous save holds (SaveOptions::async): what Booster::plan_memory adds
// to a plugin's plan when MemoryPlanInputs::async_checkpoint is set.
#include "async_save_plan.h"

#include <fmt/format.h>

#include <utility>

namespace colo::memory_planning {

namespace {

int64_t working_bytes_per_element(const PluginOptions& options) {
  const auto precision = options.find("precision");
  if (precision == options.end() || precision->second == "fp32") return 4;
  return 2;  // fp16, bf16, and fp8 (bf16 weights with float8 products)
}

bool keeps_masters(const PluginOptions& options) {
  if (working_bytes_per_element(options) == 4) return false;
  const auto masters = options.find("master_weights");
  return masters == options.end() || (masters->second != "false" && masters->second != "0");
}

}  // namespace

int64_t async_save_copy_bytes(const PluginOptions& options, const MemoryPlanInputs& in) {
  const int64_t trainable = in.model.num_trainable();
  const int64_t frozen = in.model.num_parameters() - trainable;
  const int64_t working = working_bytes_per_element(options);
  const int64_t per_trainable = working + (keeps_masters(options) ? 4 : 0) + 4 * int64_t{in.optimizer_states()};
  return trainable * per_trainable + frozen * working;
}

void add_async_save_copy(MemoryPlan& plan, const PluginOptions& options, const MemoryPlanInputs& in) {
  if (plan.ranks.empty()) return;
  // Rank 0 gathers and copies the whole state (model, masters, optimizer moments) at the save's
  // step and keeps it until its writer is done: its group of ranks splits into rank 0 and the rest.
  auto& first = plan.ranks.front();
  const auto dash = first.ranks.find('-');
  if (first.ranks.rfind("0", 0) == 0 && dash != std::string::npos && first.ranks.find(',') == std::string::npos) {
    RankMemory rest = first;
    rest.ranks = fmt::format("1{}", first.ranks.substr(dash));
    if (rest.ranks == "1-1") rest.ranks = "1";
    first.ranks = "0";
    plan.ranks.insert(plan.ranks.begin() + 1, std::move(rest));
  }
  plan.ranks.front().parts.push_back({"asynchronous save's host copy (whole state)",
                                      async_save_copy_bytes(options, in), /*on_host=*/true, /*estimate=*/false});
  plan.notes.push_back(
      plan.pipelined
          ? "async save: counted as the whole state on rank 0; under a pipeline each stage's writing rank copies "
            "its stage's part, so rank 0's figure is an upper bound and the other stages' writers hold theirs"
          : "async save: rank 0 copies the whole state to host memory at each save and holds it until written");
}

}  // namespace colo::memory_planning
