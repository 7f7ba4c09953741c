#include "colossalai_option_names.h"

#include <fmt/format.h>

namespace colo::detail {

// Each hint is checked against the code it names (the plugins' option readers); the guide says
// the same at more length under the anchor. A test keeps every anchor a heading of the guide.
const std::vector<ColossalAiOption>& colossalai_options() {
  static const std::vector<ColossalAiOption> options = {
      {"mixed_precision", "colo has no Booster-wide precision; give the plugin precision=fp32|bf16|fp16|fp8 [fp32]",
       "the-booster"},

      {"max_norm", "colo calls it max_grad_norm [0: off]", "options-every-plugin-shares"},
      {"norm_type", "colo clips by the global L2 norm only, as Colossal-AI does; leave it out",
       "options-every-plugin-shares"},
      {"use_fp8", "colo's precision=fp8 (bf16 with float8 products in the linear layers)",
       "options-every-plugin-shares"},
      {"fp8_communication",
       "not in colo; communication_dtype=fp32|bf16|fp16 sets the dtype gradients are reduced in",
       "options-every-plugin-shares"},
      {"verbose", "not in colo; leave it out", "options-every-plugin-shares"},

      {"check_reduction",
       "not in colo, whose check is always on: a parameter that gets no gradient is an error naming it, unless "
       "find_unused_parameters=true",
       "torchddpplugin"},
      {"static_graph",
       "not in colo: its buckets are fixed at boost and never rebuilt, what static_graph gives PyTorch's DDP",
       "torchddpplugin"},

      {"reduce_bucket_size_in_m", "colo's reduce_bucket_size_mb [25 MiB; Colossal-AI's 12]", "lowlevelzeroplugin"},
      {"overlap_allgather",
       "colo's overlap_communication [true] also gathers the updated weights during the next forward",
       "lowlevelzeroplugin"},
      {"extra_dp_size", "not in colo; for data parallelism inside a larger layout use hybrid_parallel (dp x pp x tp)",
       "lowlevelzeroplugin"},

      {"chunk_config_dict", "colo's chunk_size_mb [0: searched from the layer sizes]", "geminiplugin"},
      {"search_range_m", "colo's chunk_size_mb [0: searched from the layer sizes]", "geminiplugin"},
      {"min_chunk_size_m", "colo's chunk_size_mb [0: searched from the layer sizes]", "geminiplugin"},
      {"hidden_dim", "colo's chunk_size_mb [0: searched from the layer sizes]", "geminiplugin"},
      {"enable_gradient_accumulation", "not needed in colo: booster.no_sync accumulates gradients under gemini",
       "geminiplugin"},
      {"warmup_non_model_data_ratio",
       "not in colo: placement_policy=auto measures the first step, then keeps optimizer state on the device while "
       "steady_cuda_cap_ratio [0.9] allows",
       "geminiplugin"},
      {"gpu_margin_mem_ratio", "not in colo: placement_policy=auto sizes itself with steady_cuda_cap_ratio [0.9]",
       "geminiplugin"},
      {"enable_async_reduce",
       "colo's overlap_communication [true]: each chunk's gradients are reduce-scattered as soon as they are complete",
       "geminiplugin"},

      {"enable_all_optimization",
       "not in colo, whose optimizations have no switches: fused attention always, and on GPUs colo's own LayerNorm "
       "and GELU kernels",
       "hybridparallelplugin"},
      {"enable_fused_normalization",
       "not in colo: on GPUs LayerNorm (and residual add + LayerNorm) always runs in colo's own CUDA kernels",
       "hybridparallelplugin"},
      {"enable_flash_attention",
       "not in colo: attention always calls scaled_dot_product_attention, which picks flash or memory-efficient "
       "kernels where LibTorch has them",
       "hybridparallelplugin"},
      {"enable_jit_fused", "not in colo (no TorchScript); on GPUs GELU runs in colo's own CUDA kernel",
       "hybridparallelplugin"},
      {"enable_sequence_overlap",
       "not in colo (nor in Colossal-AI since 2024); enable_sequence_parallelism=true has no overlap switch",
       "hybridparallelplugin"},
      {"sequence_parallelism_mode",
       "not in colo: enable_sequence_parallelism=true is one mode, Colossal-AI's split_gather",
       "hybridparallelplugin"},
      {"sp_size", "not in colo: sequence parallelism runs over the tensor-parallel ranks (enable_sequence_parallelism)",
       "hybridparallelplugin"},
      {"ddp_bucket_cap_mb", "colo's bucket_cap_mb [25]", "hybridparallelplugin"},
      {"zero_bucket_size_in_m", "colo's bucket_cap_mb, which sizes ZeRO's buckets too [25 MiB; Colossal-AI's 12]",
       "hybridparallelplugin"},
      {"num_layers_per_stage", "colo's layers_per_stage, comma-separated (e.g. 7,5)", "hybridparallelplugin"},
      {"custom_policy", "not an option in colo: register a shardformer policy before boost", "hybridparallelplugin"},
      {"gradient_checkpoint_config",
       "not an option in colo: call model->set_activation_checkpointing(true), or Layer::set_activation_checkpointing",
       "hybridparallelplugin"},
      {"scheduler_nodes", "not in colo: pp_style=zero_bubble builds its schedule itself (ZB-H1; zbv is not in colo)",
       "hybridparallelplugin"},
      {"dp_outside", "not in colo: its mesh always has dp outermost and tp innermost", "hybridparallelplugin"},
      {"parallel_output", "not in colo: a ViT's head stays whole (no vocabulary to split)", "hybridparallelplugin"},
      {"make_vocab_size_divisible_by", "not in colo: a ViT's head stays whole (no vocabulary to split)",
       "hybridparallelplugin"},
      {"inner_ring_size", "not in colo (no ring attention)", "hybridparallelplugin"},
  };
  return options;
}

std::string colossalai_option_hint(const std::string& key) {
  for (const auto& option : colossalai_options()) {
    if (key == option.name) {
      return fmt::format("a Colossal-AI option: {}; see {}#{}", option.hint, kColossalAiGuide, option.anchor);
    }
  }
  return "";
}

}  // namespace colo::detail
