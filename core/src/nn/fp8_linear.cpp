#include <colo/nn/fp8_linear.h>

#include <colo/compat/torch_compat.h>
#include <colo/nn/deferred_weight_grads.h>
#include <colo/nn/gelu.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdint>
#include <stdexcept>

// Float8 products need LibTorch's float8 types and at::_scaled_mm (2.1 on) and colo's cast kernel.
#if defined(COLO_WITH_CUDA_KERNELS) && COLO_TORCH_AT_LEAST(2, 1)
#define COLO_WITH_FP8 1
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAStream.h>

#include "../kernels/column_sum.h"
#include "../kernels/fp8_cast.h"
#include "bias_gradient.h"
#endif

namespace colo::nn {
namespace {

[[maybe_unused]] int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

#ifdef COLO_WITH_FP8

// One operand in float8: its row-major and/or transposed copies and the scale that undoes the
// cast (max|x| / float8_max: _scaled_mm multiplies the product by both operands' such scales).
struct Fp8Operand {
  torch::Tensor row_major;   // [rows, cols]
  torch::Tensor transposed;  // [cols, ld], columns rows..ld-1 zero
  torch::Tensor inverse_scale;
};

bool starts_16_byte_aligned(const torch::Tensor& t) { return reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0; }

// Where one operand's scale comes from: its own max|x| (current scaling: `delayed` null), or its
// delayed scale with its amax slot, recorded into when `record` (training).
struct OperandScaling {
  const torch::Tensor* scale = nullptr;
  const torch::Tensor* amax_slot = nullptr;
  bool primed = false;
  bool record = false;
};

[[noreturn]] void throw_launch_error(const torch::Tensor& x, cudaError_t status) {
  throw std::runtime_error(fmt::format(
      "colo::nn::fp8_linear: colo's float8 cast kernel did not launch on {} ({} x {} values): {}{}", x.device().str(),
      x.size(0), x.size(1), cudaGetErrorString(status),
      status == cudaErrorNoKernelImageForDevice
          ? " (colo was compiled for other GPU architectures: rebuild with -DCOLO_CUDA_ARCHITECTURES=<this GPU's, e.g. 89>)"
          : ""));
}

// x: bf16 [rows, cols] on the GPU; what is cast is prologue(x) (x itself, or its GELU).
Fp8Operand cast_to_fp8(torch::Tensor x, kernels::Fp8Format format, bool row_major, bool transposed, int64_t ld,
                       const OperandScaling& how = {}, kernels::Fp8Prologue prologue = kernels::Fp8Prologue::kNone) {
  x = x.contiguous();
  if (!starts_16_byte_aligned(x)) x = x.clone();
  const int64_t rows = x.size(0), cols = x.size(1);
  const auto dtype = format == kernels::Fp8Format::kE4M3 ? torch::kFloat8_e4m3fn : torch::kFloat8_e5m2;
  const auto stream = c10::cuda::getCurrentCUDAStream(x.device().index());
  const auto fp32 = x.options().dtype(torch::kFloat);
  Fp8Operand out;
  out.inverse_scale = x.numel() == 0 ? torch::ones({}, fp32) : torch::empty({}, fp32);
  const auto options = x.options().dtype(dtype);
  if (row_major) out.row_major = torch::empty({rows, cols}, options);
  if (transposed) out.transposed = torch::empty({cols, ld}, options);
  kernels::Fp8CastScaling scaling;
  scaling.inverse_scale = out.inverse_scale.data_ptr<float>();
  scaling.prologue = prologue;
  cudaError_t status = cudaSuccess;
  torch::Tensor amax;
  if (how.scale != nullptr && how.primed) {
    // Delayed: one launch, the amax recorded by the cast itself.
    scaling.scale = how.scale->data_ptr<float>();
    if (how.record) scaling.amax_out = how.amax_slot->data_ptr<float>();
  } else {
    // Current scaling (and a delayed run's first step): max|x| (colo's one-pass kernel, into a
    // zeroed fp32 scalar, or into the operand's slot, which then holds the step's amax so far),
    // then the cast, which also writes the inverse scale: no host sync.
    amax = how.scale != nullptr && how.record ? *how.amax_slot : torch::zeros({}, fp32);
    status = kernels::bf16_abs_max(x.data_ptr(), x.numel(), amax.data_ptr<float>(), stream, prologue);
    scaling.amax = amax.data_ptr<float>();
  }
  if (status == cudaSuccess) {
    status = kernels::fp8_scaled_cast(format, x.data_ptr(), rows, cols, scaling,
                                      row_major ? out.row_major.data_ptr() : nullptr,
                                      transposed ? out.transposed.data_ptr() : nullptr, ld, stream);
  }
  if (status != cudaSuccess) throw_launch_error(x, status);
  return out;
}

torch::Tensor scaled_mm(const torch::Tensor& a, const torch::Tensor& b, const Fp8Operand& sa, const torch::Tensor& sb,
                        const torch::Tensor& bias, bool fast_accumulation) {
  return at::_scaled_mm(a, b, sa.inverse_scale, sb, bias.defined() ? std::optional<at::Tensor>(bias) : std::nullopt,
                        std::nullopt, torch::kBFloat16, fast_accumulation);
}

// Where one layer's operands take their scales from (current scaling: `delayed` null).
std::pair<OperandScaling, OperandScaling> operand_scalings(const Fp8OperandScales* delayed, bool grad_mode) {
  OperandScaling input_scaling, weight_scaling;
  if (delayed != nullptr) {
    input_scaling = {&delayed->input_scale, &delayed->input_amax, *delayed->primed, grad_mode};
    weight_scaling = {&delayed->weight_scale, &delayed->weight_amax, *delayed->primed, grad_mode};
  }
  return {input_scaling, weight_scaling};
}

// One forward product of x ([rows, in] bf16, or fc1's output under the GELU prologue) with its
// float8 operands: the transposed copies only where a gradient will need them (the input's for
// the weight gradient, the weight's for the input gradient), none under no_grad (evaluation).
// Amaxes are recorded in training only: evaluation's activations are not the next step's.
struct ProductForward {
  torch::Tensor y;  // [rows, out] bf16
  Fp8Operand input, weight;
};

ProductForward product_forward(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                               bool grad_mode, bool input_needs_grad, const Fp8OperandScales* delayed,
                               kernels::Fp8Prologue prologue = kernels::Fp8Prologue::kNone) {
  const int64_t out = weight.size(0), padded = round_up(x.size(0), 16);
  const auto [input_scaling, weight_scaling] = operand_scalings(delayed, grad_mode);
  ProductForward p;
  p.input = cast_to_fp8(x, kernels::Fp8Format::kE4M3, true, grad_mode && weight.requires_grad(), padded,
                        input_scaling, prologue);
  p.weight = cast_to_fp8(weight, kernels::Fp8Format::kE4M3, true, grad_mode && input_needs_grad, out, weight_scaling);
  // Forward products take the fast (less often re-normalised) accumulation, as the float8
  // recipes of cuBLAS and torchao do; gradients the exact one.
  p.y = scaled_mm(p.input.row_major, p.weight.row_major.t(), p.input, p.weight.inverse_scale, bias, true);
  return p;
}

// Saved: the input's transposed e4m3 copy (for the weight gradient), the weight's transposed e4m3
// copy (for the input gradient), their scales, and the weight and bias themselves (the targets of
// a deferred weight gradient). `bias` may be undefined (the bias-free function below). With
// `gelu_input` the product's input is gelu(input), made inside the cast; `input` (fc1's output)
// is saved too, for the GELU's backward.
torch::Tensor fp8_forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                          const torch::Tensor& weight, const torch::Tensor& bias, bool grad_mode,
                          const Fp8OperandScales* delayed, bool gelu_input = false) {
  const int64_t in = weight.size(1), out = weight.size(0);
  const auto x = input.reshape({-1, in});
  const int64_t rows = x.size(0);
  const auto p = product_forward(x, weight, bias, grad_mode, input.requires_grad(), delayed,
                                 gelu_input ? kernels::Fp8Prologue::kGelu : kernels::Fp8Prologue::kNone);
  const auto& xo = p.input;
  const auto& wo = p.weight;
  if (gelu_input) {
    ctx->save_for_backward({xo.transposed, wo.transposed, xo.inverse_scale, wo.inverse_scale, weight, input});
  } else {
    ctx->save_for_backward({xo.transposed, wo.transposed, xo.inverse_scale, wo.inverse_scale, weight});
  }
  if (bias.defined()) ctx->saved_data["bias"] = bias;
  ctx->saved_data["rows"] = rows;
  if (delayed != nullptr) {
    ctx->saved_data["grad_scale"] = delayed->grad_scale;
    ctx->saved_data["grad_amax"] = delayed->grad_amax;
    ctx->saved_data["primed"] = *delayed->primed;
  }
  auto sizes = input.sizes().vec();
  sizes.back() = out;
  return p.y.view(sizes);
}

// Input, weight and bias gradients (the bias's undefined for a bias-free layer).
torch::autograd::tensor_list fp8_backward(torch::autograd::AutogradContext* ctx, const torch::Tensor& grad,
                                          bool need_bias) {
  const auto saved = ctx->get_saved_variables();
  const auto &input_t = saved[0], &weight_t = saved[1], &input_scale = saved[2], &weight_scale = saved[3];
  const auto& weight = saved[4];
  const auto bias = need_bias ? ctx->saved_data["bias"].toTensor() : torch::Tensor();
  const int64_t rows = ctx->saved_data["rows"].toInt();
  const int64_t in = weight.size(1), out = weight.size(0);
  const bool need_input = ctx->needs_input_grad(0), need_weight = ctx->needs_input_grad(1);
  const auto g = grad.reshape({-1, out});
  // Under delayed scaling: the output gradient's slot; primed as the forward was (a step's update
  // comes after its backwards).
  OperandScaling how;
  torch::Tensor grad_scale, grad_amax;
  if (ctx->saved_data.count("grad_scale")) {
    grad_scale = ctx->saved_data["grad_scale"].toTensor();
    grad_amax = ctx->saved_data["grad_amax"].toTensor();
    how = {&grad_scale, &grad_amax, ctx->saved_data["primed"].toBool(), true};
  }
  const auto go =
      cast_to_fp8(g, kernels::Fp8Format::kE5M2, need_input, need_weight, need_weight ? input_t.size(1) : rows, how);

  torch::Tensor grad_input, grad_weight, grad_bias;
  if (need_input) {
    auto sizes = grad.sizes().vec();
    sizes.back() = in;
    grad_input = scaled_mm(go.row_major, weight_t.t(), go, weight_scale, torch::Tensor(), false).view(sizes);
    // fp8_gelu_linear: through the GELU to fc1's output (ATen's backward, as colo::nn::gelu's).
    if (saved.size() > 5) grad_input = at::gelu_backward(grad_input, saved[5]);
  }
  auto weight_grad = [go, input_t, input_scale] {
    return scaled_mm(go.transposed, input_t.t(), go, input_scale, torch::Tensor(), false);
  };
  auto bias_grad = [g] { return detail::bias_gradient(g); };
  if (auto* deferred = WeightGradDeferral::active(); deferred && (need_weight || need_bias)) {
    deferred->add([weight_grad, bias_grad, weight, bias, need_weight, need_bias] {
      if (need_weight) accumulate_grad(weight, weight_grad());
      if (need_bias) accumulate_grad(bias, bias_grad());
    });
    return {grad_input, torch::Tensor(), torch::Tensor()};
  }
  if (need_weight) grad_weight = weight_grad();
  if (need_bias) grad_bias = bias_grad();
  return {grad_input, grad_weight, grad_bias};
}

struct Fp8LinearFunction : torch::autograd::Function<Fp8LinearFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight, const torch::Tensor& bias, bool grad_mode,
                               const Fp8OperandScales* delayed) {
    return fp8_forward(ctx, input, weight, bias, grad_mode, delayed);
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    auto out = fp8_backward(ctx, grads[0], ctx->needs_input_grad(2));
    out.push_back(torch::Tensor());  // grad_mode
    out.push_back(torch::Tensor());  // delayed
    return out;
  }
};

// fp8_linear(gelu(pre), ...) as one step: the GELU inside the cast of the product's input.
struct Fp8GeluLinearFunction : torch::autograd::Function<Fp8GeluLinearFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& pre,
                               const torch::Tensor& weight, const torch::Tensor& bias, bool grad_mode,
                               const Fp8OperandScales* delayed) {
    return fp8_forward(ctx, pre, weight, bias, grad_mode, delayed, true);
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    auto out = fp8_backward(ctx, grads[0], ctx->needs_input_grad(2));
    out.push_back(torch::Tensor());  // grad_mode
    out.push_back(torch::Tensor());  // delayed
    return out;
  }
};

// The same without a bias (custom functions take no undefined inputs, in 2.x as in 1.13).
struct Fp8BiasFreeLinearFunction : torch::autograd::Function<Fp8BiasFreeLinearFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight, bool grad_mode, const Fp8OperandScales* delayed) {
    return fp8_forward(ctx, input, weight, torch::Tensor(), grad_mode, delayed);
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    auto out = fp8_backward(ctx, grads[0], false);
    out.back() = torch::Tensor();  // grad_mode's place
    out.push_back(torch::Tensor());  // delayed
    return out;
  }
};

// The MLP's fc1 → GELU → fc2 as one function (fp8_mlp): forward as fp8_linear then
// fp8_gelu_linear; backward with fc1's float8 output gradient and its bias gradient's column sums
// made inside the GELU's backward (kernels::fp8_gelu_backward_cast), which needs fc1's gradient
// scale before the pass: primed delayed scaling (the caller checks). Inputs: x, w1, b1, w2, b2.
struct Fp8MlpFunction : torch::autograd::Function<Fp8MlpFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& w1, const torch::Tensor& b1, const torch::Tensor& w2,
                               const torch::Tensor& b2, const Fp8OperandScales* fc1, const Fp8OperandScales* fc2) {
    const int64_t in = w1.size(1), out = w2.size(0);
    const auto x = input.reshape({-1, in});
    const int64_t rows = x.size(0);
    // Training only (the caller checks grad mode): fc2's input gradient is needed whenever
    // anything before it is.
    const auto first = product_forward(x, w1, b1, true, input.requires_grad(), fc1);
    const auto second = product_forward(first.y, w2, b2, true, true, fc2, kernels::Fp8Prologue::kGelu);
    ctx->save_for_backward({first.input.transposed, first.weight.transposed, first.input.inverse_scale,
                            first.weight.inverse_scale, w1, second.input.transposed, second.weight.transposed,
                            second.input.inverse_scale, second.weight.inverse_scale, w2, first.y});
    ctx->saved_data["b1"] = b1;
    ctx->saved_data["b2"] = b2;
    ctx->saved_data["rows"] = rows;
    ctx->saved_data["grad_scale1"] = fc1->grad_scale;
    ctx->saved_data["grad_amax1"] = fc1->grad_amax;
    ctx->saved_data["grad_scale2"] = fc2->grad_scale;
    ctx->saved_data["grad_amax2"] = fc2->grad_amax;
    ctx->saved_data["primed2"] = *fc2->primed;
    auto sizes = input.sizes().vec();
    sizes.back() = out;
    return second.y.view(sizes);
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x_t = saved[0], &w1_t = saved[1], &x_scale = saved[2], &w1_scale = saved[3], &w1 = saved[4];
    const auto &h_t = saved[5], &w2_t = saved[6], &h_scale = saved[7], &w2_scale = saved[8], &w2 = saved[9];
    const auto& pre = saved[10];
    const auto b1 = ctx->saved_data["b1"].toTensor(), b2 = ctx->saved_data["b2"].toTensor();
    const int64_t rows = ctx->saved_data["rows"].toInt();
    const int64_t in = w1.size(1), hidden = w1.size(0), out = w2.size(0);
    const bool need_x = ctx->needs_input_grad(0), need_w1 = ctx->needs_input_grad(1), need_b1 = ctx->needs_input_grad(2);
    const bool need_w2 = ctx->needs_input_grad(3), need_b2 = ctx->needs_input_grad(4);
    const bool need_hidden = need_x || need_w1 || need_b1;
    const auto g = grads[0].reshape({-1, out});
    auto grad_scale1 = ctx->saved_data["grad_scale1"].toTensor(), grad_amax1 = ctx->saved_data["grad_amax1"].toTensor();
    auto grad_scale2 = ctx->saved_data["grad_scale2"].toTensor(), grad_amax2 = ctx->saved_data["grad_amax2"].toTensor();
    const OperandScaling how2{&grad_scale2, &grad_amax2, ctx->saved_data["primed2"].toBool(), true};
    const auto go2 = cast_to_fp8(g, kernels::Fp8Format::kE5M2, need_hidden, need_w2,
                                 need_w2 ? h_t.size(1) : rows, how2);

    // fc1's output gradient in e5m2 straight from the GELU's backward, with its bias's column sums.
    Fp8Operand go1;
    torch::Tensor partials, grad_input;
    if (need_hidden) {
      const auto dh = scaled_mm(go2.row_major, w2_t.t(), go2, w2_scale, torch::Tensor(), false).contiguous();
      const auto pre2 = pre.reshape({-1, hidden}).contiguous();
      const int64_t ld = x_t.defined() ? x_t.size(1) : round_up(rows, 16);
      const auto e5m2 = dh.options().dtype(torch::kFloat8_e5m2);
      if (need_x) go1.row_major = torch::empty({rows, hidden}, e5m2);
      if (need_w1) go1.transposed = torch::empty({hidden, ld}, e5m2);
      go1.inverse_scale = torch::empty({}, dh.options().dtype(torch::kFloat));
      partials = torch::empty({kernels::fp8_cast_row_tiles(rows, ld, need_w1), hidden},
                              dh.options().dtype(torch::kFloat));
      kernels::Fp8CastScaling scaling;
      scaling.scale = grad_scale1.data_ptr<float>();
      scaling.inverse_scale = go1.inverse_scale.data_ptr<float>();
      scaling.amax_out = grad_amax1.data_ptr<float>();
      const auto status = kernels::fp8_gelu_backward_cast(
          kernels::Fp8Format::kE5M2, dh.data_ptr(), pre2.data_ptr(), rows, hidden, scaling,
          need_x ? go1.row_major.data_ptr() : nullptr, need_w1 ? go1.transposed.data_ptr() : nullptr, ld,
          partials.data_ptr<float>(), c10::cuda::getCurrentCUDAStream(dh.device().index()));
      if (status != cudaSuccess) throw_launch_error(dh, status);
      if (need_x) {
        auto sizes = grads[0].sizes().vec();
        sizes.back() = in;
        grad_input = scaled_mm(go1.row_major, w1_t.t(), go1, w1_scale, torch::Tensor(), false).view(sizes);
      }
    }
    auto w1_grad = [go1, x_t, x_scale] {
      return scaled_mm(go1.transposed, x_t.t(), go1, x_scale, torch::Tensor(), false);
    };
    auto b1_grad = [partials, hidden] {
      auto sum = torch::empty({hidden}, partials.options().dtype(torch::kBFloat16));
      const auto status = kernels::column_sum_add_chunks(kernels::ElementType::kBFloat16, partials.data_ptr<float>(),
                                                         partials.size(0), hidden, sum.data_ptr(),
                                                         c10::cuda::getCurrentCUDAStream(partials.device().index()));
      if (status != cudaSuccess) throw_launch_error(partials, status);
      return sum;
    };
    auto w2_grad = [go2, h_t, h_scale] {
      return scaled_mm(go2.transposed, h_t.t(), go2, h_scale, torch::Tensor(), false);
    };
    auto b2_grad = [g] { return detail::bias_gradient(g); };
    if (auto* deferred = WeightGradDeferral::active(); deferred && (need_w1 || need_b1 || need_w2 || need_b2)) {
      deferred->add([=] {
        if (need_w1) accumulate_grad(w1, w1_grad());
        if (need_b1) accumulate_grad(b1, b1_grad());
        if (need_w2) accumulate_grad(w2, w2_grad());
        if (need_b2) accumulate_grad(b2, b2_grad());
      });
      return {grad_input, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(),
              torch::Tensor()};
    }
    return {grad_input,
            need_w1 ? w1_grad() : torch::Tensor(),
            need_b1 ? b1_grad() : torch::Tensor(),
            need_w2 ? w2_grad() : torch::Tensor(),
            need_b2 ? b2_grad() : torch::Tensor(),
            torch::Tensor(),
            torch::Tensor()};
  }
};

#endif  // COLO_WITH_FP8

}  // namespace

bool fp8_linear_fits(int64_t in_features, int64_t out_features) {
  return in_features > 0 && out_features > 0 && in_features % 16 == 0 && out_features % 16 == 0;
}

std::string fp8_unavailable_reason(const c10::Device& device) {
#ifdef COLO_WITH_FP8
  if (!device.is_cuda()) {
    return fmt::format("float8 products need an NVIDIA GPU of compute capability 8.9 or newer; the device is {}",
                       device.str());
  }
  const int index = device.has_index() ? device.index() : static_cast<int>(c10::cuda::current_device());
  const auto* properties = at::cuda::getDeviceProperties(index);
  if (properties->major * 10 + properties->minor < 89) {
    return fmt::format(
        "float8 products need compute capability 8.9 or newer (Ada, Hopper, Blackwell); {} ({}) has {}.{}",
        device.str(), properties->name, properties->major, properties->minor);
  }
  return "";
#elif defined(COLO_WITH_CUDA_KERNELS)
  (void)device;
  return fmt::format("colo was compiled against LibTorch {}, which has no float8 products (2.1 or newer has them)",
                     TORCH_VERSION);
#else
  return fmt::format(
      "this build of colo has no CUDA (LibTorch {} for CPUs; the device is {}): float8 products need colo's CUDA "
      "build and an NVIDIA GPU of compute capability 8.9 or newer",
      TORCH_VERSION, device.str());
#endif
}

namespace {

// What fp8_linear and fp8_gelu_linear refuse, as `caller` (their name).
void check_fp8_linear_inputs(const char* caller, const torch::Tensor& input, const torch::Tensor& weight,
                             const torch::Tensor& bias, const Fp8OperandScales* delayed) {
  if (const auto reason = fp8_unavailable_reason(input.device()); !reason.empty()) {
    throw std::invalid_argument(fmt::format("{}: {}", caller, reason));
  }
  if (input.scalar_type() != torch::kBFloat16 || weight.scalar_type() != torch::kBFloat16 ||
      (bias.defined() && bias.scalar_type() != torch::kBFloat16)) {
    throw std::invalid_argument(fmt::format("{}: input, weight and bias must be bf16 (got {}, {}, {})", caller,
                                            c10::toString(input.scalar_type()), c10::toString(weight.scalar_type()),
                                            bias.defined() ? c10::toString(bias.scalar_type()) : "no bias"));
  }
  if (weight.dim() != 2 || input.dim() < 1 || input.size(-1) != weight.size(1) ||
      !fp8_linear_fits(weight.size(1), weight.size(0))) {
    throw std::invalid_argument(
        fmt::format("{}: input {} and weight {} must be [..., in] and [out, in] with in and out multiples of 16",
                    caller, fmt::join(input.sizes(), "x"), fmt::join(weight.sizes(), "x")));
  }
  if (delayed != nullptr && delayed->input_scale.device() != input.device()) {
    throw std::invalid_argument(fmt::format("{}: the delayed scales are on {}, the input on {}", caller,
                                            delayed->input_scale.device().str(), input.device().str()));
  }
}

}  // namespace

torch::Tensor fp8_gelu_linear(const torch::Tensor& pre, const torch::Tensor& weight, const torch::Tensor& bias,
                              const Fp8OperandScales* delayed) {
  check_fp8_linear_inputs("colo::nn::fp8_gelu_linear", pre, weight, bias, delayed);
#ifdef COLO_WITH_FP8
  // Bias-free layers take the unfused pair (no ViT's fc2 is one).
  if (!bias.defined()) return fp8_linear(colo::nn::gelu(pre), weight, bias, delayed);
  return Fp8GeluLinearFunction::apply(pre, weight, bias, torch::GradMode::is_enabled(), delayed);
#else
  return {};  // unreachable: fp8_unavailable_reason is never empty here
#endif
}

bool fp8_mlp_fuses_backward(const torch::Tensor& b1, const torch::Tensor& b2, const Fp8OperandScales* fc1,
                            const Fp8OperandScales* fc2) {
  return torch::GradMode::is_enabled() && b1.defined() && b2.defined() && fc1 != nullptr && fc2 != nullptr &&
         *fc1->primed;
}

torch::Tensor fp8_mlp(const torch::Tensor& input, const torch::Tensor& w1, const torch::Tensor& b1,
                      const torch::Tensor& w2, const torch::Tensor& b2, const Fp8OperandScales* fc1,
                      const Fp8OperandScales* fc2) {
  check_fp8_linear_inputs("colo::nn::fp8_mlp (fc1)", input, w1, b1, fc1);
  if (w2.dim() != 2 || w2.size(1) != w1.size(0)) {
    throw std::invalid_argument(fmt::format("colo::nn::fp8_mlp: fc1's weight {} and fc2's {} do not chain",
                                            fmt::join(w1.sizes(), "x"), fmt::join(w2.sizes(), "x")));
  }
#ifdef COLO_WITH_FP8
  if (!fp8_mlp_fuses_backward(b1, b2, fc1, fc2)) return fp8_gelu_linear(fp8_linear(input, w1, b1, fc1), w2, b2, fc2);
  check_fp8_linear_inputs("colo::nn::fp8_mlp (fc2)", input.new_empty({1, w2.size(1)}), w2, b2, fc2);
  return Fp8MlpFunction::apply(input, w1, b1, w2, b2, fc1, fc2);
#else
  (void)b2;
  (void)fc2;
  return {};  // unreachable: fp8_unavailable_reason is never empty here
#endif
}

torch::Tensor fp8_linear(const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias,
                         const Fp8OperandScales* delayed) {
  check_fp8_linear_inputs("colo::nn::fp8_linear", input, weight, bias, delayed);
#ifdef COLO_WITH_FP8
  const bool grad_mode = torch::GradMode::is_enabled();
  return bias.defined() ? Fp8LinearFunction::apply(input, weight, bias, grad_mode, delayed)
                        : Fp8BiasFreeLinearFunction::apply(input, weight, grad_mode, delayed);
#else
  (void)delayed;
  return {};  // unreachable: fp8_unavailable_reason is never empty here
#endif
}

std::string Fp8Coverage::summary() const {
  std::string line = fmt::format("fp8: {} linear layer{} multiply in float8", converted.size(),
                                 converted.size() == 1 ? "" : "s");
  if (kept.empty()) return line;
  constexpr size_t kShown = 3;
  line += "; kept in bf16: ";
  for (size_t i = 0; i < kept.size() && i < kShown; ++i) line += (i ? ", " : "") + kept[i];
  if (kept.size() > kShown) line += fmt::format(" and {} more", kept.size() - kShown);
  return line;
}

namespace {

// Visits every Fp8Switchable layer of `model` with its name, and whether it fits.
template <typename Visit>
void for_each_switchable(const torch::nn::Module& model, Visit visit) {
  for (const auto& item : model.named_modules()) {
    auto* layer = dynamic_cast<Fp8Switchable*>(item.value().get());
    if (layer == nullptr) continue;
    const auto [in, out] = layer->fp8_features();
    visit(item.key().empty() ? std::string("(the model)") : item.key(), *layer, in, out);
  }
}

std::string why_kept(const std::string& name, int64_t in, int64_t out) {
  return fmt::format("{} ({} -> {} features: float8 products need multiples of 16)", name, in, out);
}

}  // namespace

Fp8Coverage fp8_coverage(const torch::nn::Module& model) {
  Fp8Coverage coverage;
  for_each_switchable(model, [&](const std::string& name, Fp8Switchable& layer, int64_t in, int64_t out) {
    if (layer.fp8()) coverage.converted.push_back(name);
    if (!fp8_linear_fits(in, out)) coverage.kept.push_back(why_kept(name, in, out));
  });
  return coverage;
}

Fp8Coverage use_fp8_linears(torch::nn::Module& model, const c10::Device& device, const Fp8Recipe& recipe) {
  if (const auto reason = fp8_unavailable_reason(device); !reason.empty()) {
    throw std::invalid_argument(fmt::format("precision=fp8: {}. Use precision=bf16 on this machine.", reason));
  }
  Fp8Coverage coverage;
  std::vector<Fp8Switchable*> converted;
  for_each_switchable(model, [&](const std::string& name, Fp8Switchable& layer, int64_t in, int64_t out) {
    if (fp8_linear_fits(in, out)) {
      layer.set_fp8(true);
      layer.set_fp8_scales(nullptr);
      converted.push_back(&layer);
      coverage.converted.push_back(name);
    } else {
      coverage.kept.push_back(why_kept(name, in, out));
    }
  });
  if (coverage.converted.empty()) {
    throw std::invalid_argument(fmt::format(
        "precision=fp8: no linear layer of this model can multiply in float8 ({}). colo's float8 products are for "
        "colo::nn::Linear and the shardformer's parallel linears with in and out features multiples of 16; use "
        "precision=bf16 for this model.",
        coverage.kept.empty() ? std::string("it has no colo::nn::Linear layers") : coverage.summary()));
  }
  if (recipe.scaling() == Fp8Scaling::kDelayed) {
    // One state for the model, its slots handed out in the layers' order.
    coverage.delayed_scaling = std::make_shared<Fp8DelayedScaling>(
        static_cast<int64_t>(converted.size()), recipe.delayed(), torch::TensorOptions().device(device));
    for (size_t i = 0; i < converted.size(); ++i) {
      converted[i]->set_fp8_scales(coverage.delayed_scaling->layer(static_cast<int64_t>(i)));
    }
  }
  return coverage;
}

}  // namespace colo::nn
