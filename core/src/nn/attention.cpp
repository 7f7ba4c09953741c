#include <colo/nn/attention.h>

#include <fmt/format.h>

#include <stdexcept>

#include <colo/compat/torch_compat.h>
#include <colo/nn/init.h>
#include <colo/nn/linear.h>

namespace colo::nn {

Attention::Attention(const ViTConfig& config)
    : head_dim_(config.head_dim()), attn_drop_(config.attn_drop_rate()), proj_drop_(config.drop_rate()) {
  const int64_t dim = config.embed_dim();
  Linear qkv(torch::nn::LinearOptions(dim, 3 * dim).bias(config.qkv_bias()));
  Linear proj(torch::nn::LinearOptions(dim, dim));
  init::timm_linear_init_(*qkv);
  init::timm_linear_init_(*proj);
  qkv_ = torch::nn::AnyModule(qkv);
  proj_ = torch::nn::AnyModule(proj);
  register_module("qkv", qkv_.ptr());
  register_module("proj", proj_.ptr());
}

void Attention::replace_qkv(torch::nn::AnyModule module) {
  replace_module("qkv", module.ptr());
  qkv_ = std::move(module);
}

void Attention::replace_proj(torch::nn::AnyModule module) {
  replace_module("proj", module.ptr());
  proj_ = std::move(module);
}

void Attention::set_sharded_rng(std::shared_ptr<RegionRng> rng, bool outputs_too) {
  sharded_rng_ = std::move(rng);
  rng_for_outputs_ = outputs_too;
}

torch::Tensor Attention::forward(const torch::Tensor& x) {
  const int64_t batch = x.size(0);
  auto qkv = qkv_.forward(x);
  // From qkv, not x: under sequence parallelism x holds this rank's share of the tokens and qkv
  // (after the all-gather) all of them.
  const int64_t tokens = qkv.size(1);
  if (qkv.size(-1) % (3 * head_dim_) != 0) {
    throw std::logic_error(fmt::format("Attention: qkv produced {} features, not a multiple of 3 × head_dim ({}); a "
                                       "replacement qkv module must keep whole heads",
                                       qkv.size(-1), 3 * head_dim_));
  }
  // [B, T, 3, heads, head_dim] → three [B, T, heads, head_dim] → [B, heads, T, head_dim] views.
  // unbind, not qkv[0], qkv[1], qkv[2]: the backward of unbind is one stack of the three
  // gradients; that of three selects is three zero-filled full-size tensors, three strided
  // copies and two adds (measured on an H200, ViT-B/16: ~10 ms of a ~96 ms step). Unbound on the
  // "3" dimension before the transpose, not on a leading dimension after a permute: the stack
  // then writes the gradient straight in qkv's [B, T, 3, heads, head_dim] layout, where a
  // stack on dimension 0 needed a second full copy to undo the permute. Same views, same values.
  const auto parts = qkv.reshape({batch, tokens, 3, -1, head_dim_}).unbind(2);
  torch::Tensor out;
  {
    RegionRng::Scope heads(sharded_rng_.get());
    out = compat::scaled_dot_product_attention(parts[0].transpose(1, 2), parts[1].transpose(1, 2),
                                               parts[2].transpose(1, 2), is_training() ? attn_drop_ : 0.0);
  }
  out = out.transpose(1, 2).reshape({batch, tokens, -1});
  out = proj_.forward(out);
  RegionRng::Scope tokens_scope(rng_for_outputs_ ? sharded_rng_.get() : nullptr);
  return torch::dropout(out, proj_drop_, is_training());
}

}  // namespace colo::nn
