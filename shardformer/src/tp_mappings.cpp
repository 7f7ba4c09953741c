#include <colo/dist/process_group.h>
#include <colo/shardformer/tp_mappings.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <cstdint>
#include <stdexcept>

#include "group_handle.h"

namespace colo::shardformer {
namespace {

// What travels: `x` on a device the group communicates from, as fp32 where the group cannot
// reduce the dtype (Gloo in LibTorch 1.13 has no bfloat16 collectives: "Invalid scalar type").
torch::Tensor travelling(const torch::Tensor& x, dist::ProcessGroup& group) {
  const bool stage = group.backend() == dist::Backend::kGloo && x.scalar_type() == torch::kBFloat16;
  return group.communicable(stage ? x.to(torch::kFloat) : x);
}

}  // namespace

torch::Tensor all_gather_along(const torch::Tensor& x, int64_t dim, dist::ProcessGroup& group) {
  if (group.size() == 1) return x;
  dim = dim < 0 ? dim + x.dim() : dim;
  // The group gathers along dim 0: move `dim` there and back.
  auto input = travelling(x.movedim(dim, 0).contiguous(), group);
  auto sizes = input.sizes().vec();
  sizes[0] *= group.size();
  auto output = torch::empty(sizes, input.options());
  group.all_gather(output, input).wait();
  return output.to(x.device(), x.scalar_type()).movedim(0, dim).contiguous();
}

torch::Tensor reduce_scatter_along(const torch::Tensor& x, int64_t dim, dist::ProcessGroup& group) {
  if (group.size() == 1) return x;
  dim = dim < 0 ? dim + x.dim() : dim;
  if (x.size(dim) % group.size() != 0) {
    throw std::invalid_argument(fmt::format("reduce_scatter_along: dim {} of size {} does not split over {} ranks of {}",
                                            dim, x.size(dim), group.size(), group.describe()));
  }
  auto input = travelling(x.movedim(dim, 0).contiguous(), group);
  auto sizes = input.sizes().vec();
  sizes[0] /= group.size();
  auto output = torch::empty(sizes, input.options());
  group.reduce_scatter(output, input).wait();
  return output.to(x.device(), x.scalar_type()).movedim(0, dim).contiguous();
}

torch::Tensor all_reduce_sum(const torch::Tensor& x, dist::ProcessGroup& group) {
  if (group.size() == 1) return x;
  auto sum = travelling(x.contiguous(), group);
  if (sum.is_same(x) || sum.data_ptr() == x.data_ptr()) sum = sum.clone();  // in place: not on the caller's tensor
  group.all_reduce(sum).wait();
  return sum.to(x.device(), x.scalar_type());
}

torch::Tensor broadcast_from(const torch::Tensor& x, int src, dist::ProcessGroup& group) {
  if (group.size() == 1) return x;
  // The others receive in place: into a buffer of their own, never the caller's tensor. The source
  // sends the caller's values through a tensor with a version counter of its own (variable_data):
  // a broadcast counts as an in-place write on every rank, the source's included (Gloo on CUDA
  // tensors even copies the values back), and `x` may be saved for a backward (2D's SUMMA
  // broadcasts attention's output, which scaled_dot_product_attention's CUDA kernels keep).
  auto value = travelling(group.rank() == src ? x.contiguous().variable_data()
                                              : torch::empty_like(x, at::MemoryFormat::Contiguous),
                          group);
  group.broadcast(value, src).wait();
  return value.to(x.device(), x.scalar_type());
}

namespace {

torch::Tensor my_chunk(const torch::Tensor& x, int64_t dim, dist::ProcessGroup& group) {
  if (group.size() == 1) return x;
  if (x.size(dim) % group.size() != 0) {
    throw std::invalid_argument(fmt::format("tensor parallelism: dim {} of size {} does not split over the {} ranks of {}",
                                            dim, x.size(dim), group.size(), group.describe()));
  }
  return x.chunk(group.size(), dim)[group.rank()].contiguous();
}

struct CopyToTp : torch::autograd::Function<CopyToTp> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return x;  // autograd returns an unmodified input as a view with this node attached
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list g) {
    return {all_reduce_sum(g[0], group_of(ctx)), torch::Tensor()};
  }
};

struct ReduceFromTp : torch::autograd::Function<ReduceFromTp> {
  static torch::Tensor forward(torch::autograd::AutogradContext* /*ctx*/, const torch::Tensor& x, int64_t group) {
    return all_reduce_sum(x, *from_handle(group));
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* /*ctx*/, torch::autograd::tensor_list g) {
    return {g[0], torch::Tensor()};
  }
};

struct SplitLastDim : torch::autograd::Function<SplitLastDim> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return my_chunk(x, -1, *from_handle(group));
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list g) {
    return {all_gather_along(g[0], -1, group_of(ctx)), torch::Tensor()};
  }
};

struct GatherLastDim : torch::autograd::Function<GatherLastDim> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return all_gather_along(x, -1, *from_handle(group));
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::tensor_list g) {
    return {my_chunk(g[0], -1, group_of(ctx)), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor copy_to_tp(const torch::Tensor& x, dist::ProcessGroup& group) {
  return group.size() == 1 ? x : CopyToTp::apply(x, handle_of(group));
}
torch::Tensor reduce_from_tp(const torch::Tensor& x, dist::ProcessGroup& group) {
  return group.size() == 1 ? x : ReduceFromTp::apply(x, handle_of(group));
}
torch::Tensor split_last_dim(const torch::Tensor& x, dist::ProcessGroup& group) {
  return group.size() == 1 ? x : SplitLastDim::apply(x, handle_of(group));
}
torch::Tensor gather_last_dim(const torch::Tensor& x, dist::ProcessGroup& group) {
  return group.size() == 1 ? x : GatherLastDim::apply(x, handle_of(group));
}

}  // namespace colo::shardformer
