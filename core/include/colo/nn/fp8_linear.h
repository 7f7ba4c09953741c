#pragma once

#include <colo/nn/fp8_scaling.h>
#include <colo/nn/fp8_switchable.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

namespace colo::nn {

// Linear layers whose products run in float8 (precision=fp8).
//
// y = input · weightᵀ + bias with both operands cast to float8 e4m3 and multiplied by cuBLASLt
// (at::_scaled_mm) into bf16; in backward the output gradient is cast to e5m2 (float8 with bf16's
// exponent width: gradients span more range than precision) and both gradient products run in
// float8 too. Scaling is per tensor. Without `delayed` it is current scaling: each operand is
// multiplied by float8_max / max|operand| of that very call (a max|x| pass, then the cast). With
// `delayed` (a layer's slots of its model's Fp8DelayedScaling) each operand is multiplied by its
// delayed scale and the cast records the operand's amax into its slot in the same pass (training
// only: under no_grad, evaluation, nothing is recorded); before the state's first update the
// layer scales as current scaling does, recording the amaxes.
// The bias gradient is exact (bf16, as colo::nn::linear). The input is saved for backward as its
// float8 copy (one byte per value, not bf16's two). Zero-bubble pipelines can defer its weight
// gradient as colo::nn::linear's.
//
// Inputs and weights must be bf16 on a GPU that has float8 products (fp8_unavailable_reason), with
// in and out features multiples of 16 (fp8_linear_fits); any number of token rows. Anything else is
// a std::invalid_argument saying what.
torch::Tensor fp8_linear(const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias,
                         const Fp8OperandScales* delayed = nullptr);

// fp8_linear(gelu(pre), weight, bias) with the exact GELU computed inside the float8 cast of the
// product's input (issue 39's producers): fc1's output `pre` is read once and the bf16 activation
// is never written, where the pair reads it, writes gelu(pre) and reads that again. The same
// float8 bytes, amaxes and results as the pair (the GELU rounded to bf16 before it is scaled); in
// backward the GELU's gradient is ATen's, as colo::nn::gelu's. Same requirements and refusals as
// fp8_linear; a bias-free layer takes the unfused pair.
torch::Tensor fp8_gelu_linear(const torch::Tensor& pre, const torch::Tensor& weight, const torch::Tensor& bias,
                              const Fp8OperandScales* delayed = nullptr);

// The MLP's fc1 → exact GELU → fc2 in float8: fp8_gelu_linear(fp8_linear(input, w1, b1, fc1), w2,
// b2, fc2), and in training with both biases and primed delayed scaling for fc1
// (fp8_mlp_fuses_backward) as one function whose backward makes fc1's float8 output gradient
// inside the GELU's backward, with fc1's bias gradient from the same pass (issue 39's producers):
// the bf16 gradient between them is never written or read back. Everything it computes is the
// unfused functions' bit for bit (the same float8 bytes, scales and amaxes) except fc1's bias
// gradient, equal up to the order of its fp32 sums. Same requirements and refusals as fp8_linear,
// and fc2's weight must take fc1's output.
torch::Tensor fp8_mlp(const torch::Tensor& input, const torch::Tensor& w1, const torch::Tensor& b1,
                      const torch::Tensor& w2, const torch::Tensor& b2, const Fp8OperandScales* fc1,
                      const Fp8OperandScales* fc2);

// Whether fp8_mlp takes its fused backward now (grad mode on, both biases, both layers delayed,
// fc1's state primed); otherwise it runs the unfused pair.
bool fp8_mlp_fuses_backward(const torch::Tensor& b1, const torch::Tensor& b2, const Fp8OperandScales* fc1,
                            const Fp8OperandScales* fc2);

// Why float8 products cannot run on `device` with this build of colo; empty when they can. They
// need a CUDA build of colo against LibTorch 2.1 or newer and an NVIDIA GPU of compute capability
// 8.9 or newer (Ada, Hopper, Blackwell).
std::string fp8_unavailable_reason(const c10::Device& device);

// Whether a layer of these features can multiply in float8: cuBLASLt's float8 products need both
// multiples of 16.
bool fp8_linear_fits(int64_t in_features, int64_t out_features);

// What use_fp8_linears did: the layers now in float8 and those kept in bf16 (with why), by name.
struct Fp8Coverage {
  std::vector<std::string> converted;
  std::vector<std::string> kept;  // "head (10 output features: not a multiple of 16)"
  // Under Fp8Scaling::kDelayed, the converted layers' state (its update must follow every
  // optimizer step); null under current scaling.
  std::shared_ptr<Fp8DelayedScaling> delayed_scaling;
  // One line for the console: "fp8: 96 linear layers multiply in float8; kept in bf16: head (...)".
  std::string summary() const;
};

// Turns float8 products on in every Fp8Switchable layer of `model` that fits (the others stay
// bf16 and are listed), scaled as `recipe` says (under delayed scaling one Fp8DelayedScaling for
// them all, on `device`). Throws std::invalid_argument when `device` has no float8 products
// (fp8_unavailable_reason, and to use precision=bf16) or when no layer fits.
Fp8Coverage use_fp8_linears(torch::nn::Module& model, const c10::Device& device, const Fp8Recipe& recipe = {});

// Where `model` stands now: its layers that multiply in float8, and those that cannot (and why).
Fp8Coverage fp8_coverage(const torch::nn::Module& model);

}  // namespace colo::nn
