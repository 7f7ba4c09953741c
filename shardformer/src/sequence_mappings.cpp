#include <colo/dist/process_group.h>
#include <colo/nn/layer.h>
#include <colo/shardformer/sequence_mappings.h>
#include <colo/shardformer/tp_mappings.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <stdexcept>

#include "group_handle.h"

namespace colo::shardformer {
namespace {

constexpr int64_t kTokenDim = 1;

// [B, T, ...] -> [B, T', ...] with zero tokens appended.
torch::Tensor pad(const torch::Tensor& x, int64_t padded) {
  if (x.size(kTokenDim) == padded) return x;
  if (x.size(kTokenDim) > padded) {
    throw std::invalid_argument(fmt::format("sequence parallelism: {} tokens where at most {} were expected",
                                            x.size(kTokenDim), padded));
  }
  auto sizes = x.sizes().vec();
  sizes[kTokenDim] = padded - x.size(kTokenDim);
  return torch::cat({x, torch::zeros(sizes, x.options())}, kTokenDim);
}

torch::Tensor unpad(const torch::Tensor& x, int64_t tokens) { return x.narrow(kTokenDim, 0, tokens).contiguous(); }

torch::Tensor my_share(const torch::Tensor& x, int64_t tokens, dist::ProcessGroup& group) {
  const auto padded = pad(x, padded_tokens(tokens, group.size()));
  return padded.chunk(group.size(), kTokenDim)[group.rank()].contiguous();
}

torch::Tensor gathered(const torch::Tensor& x, int64_t tokens, dist::ProcessGroup& group) {
  return unpad(all_gather_along(x, kTokenDim, group), tokens);
}

torch::Tensor reduced_share(const torch::Tensor& x, int64_t tokens, dist::ProcessGroup& group) {
  return reduce_scatter_along(pad(x, padded_tokens(tokens, group.size())), kTokenDim, group);
}

// The four functions differ only in which operation runs forward and which backward.
enum class Op { kShare, kGather, kReducedShare };
torch::Tensor run(Op op, const torch::Tensor& x, int64_t tokens, dist::ProcessGroup& group) {
  switch (op) {
    case Op::kShare:
      return my_share(x, tokens, group);
    case Op::kGather:
      return gathered(x, tokens, group);
    case Op::kReducedShare:
      return reduced_share(x, tokens, group);
  }
  throw std::logic_error("unknown sequence-parallel operation");
}

template <Op Forward, Op Backward>
struct SequenceMapping : torch::autograd::Function<SequenceMapping<Forward, Backward>> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, int64_t tokens,
                               int64_t group) {
    ctx->saved_data["group"] = group;
    ctx->saved_data["tokens"] = tokens;
    return run(Forward, x, tokens, *from_handle(group));
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list g) {
    return {run(Backward, g[0].contiguous(), ctx->saved_data["tokens"].toInt(), group_of(ctx)), torch::Tensor(),
            torch::Tensor()};
  }
};

void check_tokens(const torch::Tensor& x, int64_t tokens) {
  if (x.dim() < 2 || tokens < 1) {
    throw std::invalid_argument(fmt::format(
        "sequence parallelism works on [batch, tokens, ...] activations of {} real tokens; got a {}-dimensional tensor",
        tokens, x.dim()));
  }
}

}  // namespace

int64_t padded_tokens(int64_t tokens, int64_t ranks) { return (tokens + ranks - 1) / ranks * ranks; }

torch::Tensor split_sequence(const torch::Tensor& x, int64_t tokens, dist::ProcessGroup& group) {
  check_tokens(x, tokens);
  if (group.size() == 1) return x;
  return SequenceMapping<Op::kShare, Op::kGather>::apply(x, tokens, handle_of(group));
}

torch::Tensor gather_sequence(const torch::Tensor& x, int64_t tokens, dist::ProcessGroup& group) {
  check_tokens(x, tokens);
  if (group.size() == 1) return x;
  return SequenceMapping<Op::kGather, Op::kShare>::apply(x, tokens, handle_of(group));
}

torch::Tensor gather_sequence_for_tp(const torch::Tensor& x, int64_t tokens, dist::ProcessGroup& group) {
  check_tokens(x, tokens);
  if (group.size() == 1) return x;
  return SequenceMapping<Op::kGather, Op::kReducedShare>::apply(x, tokens, handle_of(group));
}

torch::Tensor reduce_scatter_sequence(const torch::Tensor& x, int64_t tokens, dist::ProcessGroup& group) {
  check_tokens(x, tokens);
  if (group.size() == 1) return x;
  return SequenceMapping<Op::kReducedShare, Op::kGather>::apply(x, tokens, handle_of(group));
}

void sum_partial_gradients(nn::Layer& layer, const std::shared_ptr<dist::ProcessGroup>& group) {
  for (const auto& item : layer.named_parameters()) {
    if (layer.shard_specs().count(item.key())) continue;
    auto param = item.value();
    param.register_hook([group](const torch::Tensor& grad) { return all_reduce_sum(grad, *group); });
  }
}

}  // namespace colo::shardformer
