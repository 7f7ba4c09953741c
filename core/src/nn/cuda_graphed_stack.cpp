#include <colo/compat/torch_compat.h>
#include <colo/nn/cuda_graphed_stack.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#ifdef COLO_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <map>
#include <stdexcept>
#include <utility>
#include <vector>

namespace colo::nn {

std::optional<std::string> cuda_graphs_unavailable_reason(const torch::Device& device) {
#ifndef COLO_WITH_CUDA
  (void)device;
  return std::string("colo was built without CUDA: CUDA graphs need the CUDA build and a GPU");
#else
  if (!device.is_cuda()) {
    return fmt::format("the model trains on {}, not on a GPU: CUDA graphs capture GPU work only", device.str());
  }
  return std::nullopt;
#endif
}

#ifdef COLO_WITH_CUDA

namespace {

// The layers whose activation checkpointing is on, by index: a graph cannot hold them.
std::vector<std::size_t> checkpointed_layers(const LayerStack& stack) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < stack.size(); ++i) {
    if (stack.layer(i)->activation_checkpointing()) out.push_back(i);
  }
  return out;
}

std::string signature_of(const torch::Tensor& t) {
  return fmt::format("{}:{}:{}:{}", fmt::join(t.sizes(), "x"), c10::toString(t.scalar_type()), t.device().str(),
                     t.requires_grad() ? "grad" : "nograd");
}

}  // namespace

// One input shape's graphs and their static tensors (which live as long as the graphs). Named,
// not anonymous: CudaGraphedStack::Impl, a member type of an exported class, holds them.
namespace detail {
struct CapturedGraphs {
  at::cuda::CUDAGraph forward_graph;
  at::cuda::CUDAGraph backward_graph;
  torch::Tensor static_input;
  torch::Tensor static_output;
  torch::Tensor static_grad_output;
  torch::Tensor static_grad_input;  // defined when the input needs a gradient
};
}  // namespace detail
using Captured = detail::CapturedGraphs;

struct CudaGraphedStack::Impl {
  CudaGraphOptions options;
  std::vector<torch::Tensor> params;        // the trainable parameters, in stack order
  std::vector<torch::Tensor> grad_buffers;  // their gradients' fixed home (written by backward graphs)
  std::map<std::string, std::unique_ptr<Captured>> captured;
  std::optional<at::cuda::MempoolId_t> pool;  // shared by every capture (one shape's graphs run at a time)
  torch::Tensor anchor;                       // makes the replay's output require a gradient
  std::optional<compat::WeakNode> pending;    // the last training forward, while its backward is owed
  int64_t replays = 0;

  // Before a backward replay: every parameter's .grad is its buffer, holding what was
  // accumulated so far (zero after a zero_grad that dropped it).
  void adopt_gradients() {
    std::vector<torch::Tensor> to_zero;
    for (std::size_t k = 0; k < params.size(); ++k) {
      auto& grad = params[k].mutable_grad();
      if (grad.defined() && grad.is_same(grad_buffers[k])) continue;
      if (grad.defined()) {
        grad_buffers[k].copy_(grad);
      } else {
        to_zero.push_back(grad_buffers[k]);
      }
      grad = grad_buffers[k];
    }
    if (!to_zero.empty()) torch::_foreach_zero_(to_zero);
  }

  Captured& capture(LayerStack& stack, const torch::Tensor& input);
};

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// The replay as one autograd node: forward copies the input into the static buffer and
// replays the forward graph; backward copies the output gradient in and replays the backward
// graph, which also accumulates the parameters' gradients.
struct GraphReplay : torch::autograd::Function<GraphReplay> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input, const torch::Tensor& anchor,
                               CudaGraphedStack::Impl* impl, Captured* captured) {
    (void)anchor;
    captured->static_input.detach().copy_(input);
    captured->forward_graph.replay();
    ++impl->replays;
    ctx->saved_data["impl"] = reinterpret_cast<int64_t>(impl);
    ctx->saved_data["captured"] = reinterpret_cast<int64_t>(captured);
    return captured->static_output.detach();
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto* impl = reinterpret_cast<CudaGraphedStack::Impl*>(ctx->saved_data["impl"].toInt());
    auto* captured = reinterpret_cast<Captured*>(ctx->saved_data["captured"].toInt());
    impl->adopt_gradients();
    if (grads[0].defined()) {
      captured->static_grad_output.copy_(grads[0]);
    } else {
      captured->static_grad_output.zero_();
    }
    captured->backward_graph.replay();
    impl->pending.reset();
    // The static gradient is overwritten by the next replay: the caller gets its own copy.
    torch::Tensor grad_input =
        captured->static_grad_input.defined() ? captured->static_grad_input.clone() : torch::Tensor();
    return {grad_input, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// Restores the random state and the buffers (BatchNorm statistics) that warm-up passes change.
class SideEffectGuard {
 public:
  SideEffectGuard(LayerStack& stack, const torch::Device& device)
      : device_(device), rng_(compat::cuda_rng_state(device)) {
    for (auto& b : stack.buffers()) saved_.emplace_back(b, b.clone());
  }
  ~SideEffectGuard() {
    torch::NoGradGuard no_grad;
    for (auto& [buffer, copy] : saved_) buffer.copy_(copy);
    compat::set_cuda_rng_state(device_, rng_);
  }

 private:
  torch::Device device_;
  torch::Tensor rng_;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> saved_;
};

}  // namespace

Captured& CudaGraphedStack::Impl::capture(LayerStack& stack, const torch::Tensor& input) {
  if (static_cast<int>(captured.size()) >= options.max_shapes()) {
    std::vector<std::string> shapes;
    for (const auto& [key, _] : captured) shapes.push_back(key);
    throw std::invalid_argument(fmt::format(
        "cuda_graphs: a training input of shape {} would be the {}th captured shape (already: {}); each shape "
        "holds its own graphs and activations: give the loader a fixed batch (drop_last) or set cuda_graphs=false",
        signature_of(input), captured.size() + 1, fmt::join(shapes, ", ")));
  }
  const auto checkpointed = checkpointed_layers(stack);
  if (!checkpointed.empty()) {
    throw std::invalid_argument(fmt::format(
        "cuda_graphs: layers [{}] checkpoint their activations, which reads the random state on the host in "
        "forward: a CUDA graph cannot hold that; turn activation checkpointing off or set cuda_graphs=false",
        fmt::join(checkpointed, ",")));
  }
  const auto device = input.device();
  c10::cuda::CUDAGuard device_guard(device);
  auto current = c10::cuda::getCurrentCUDAStream(device.index());
  auto side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index());
  at::cuda::CUDAEvent ready;
  ready.record(current);
  ready.block(side);

  std::vector<torch::Tensor> grad_inputs;
  auto entry = std::make_unique<Captured>();
  Captured& c = *entry;
  try {
    c10::cuda::CUDAStreamGuard stream_guard(side);
    const bool input_grad = input.requires_grad();
    {
      // Warm-up: eager passes whose gradients go nowhere (autograd::grad, not backward).
      SideEffectGuard restore(stack, device);
      for (int i = 0; i < options.warmup_iterations(); ++i) {
        auto x = input.detach().clone().requires_grad_(input_grad);
        auto y = stack.forward(x);
        std::vector<torch::Tensor> wrt;
        if (input_grad) wrt.push_back(x);
        wrt.insert(wrt.end(), params.begin(), params.end());
        if (!wrt.empty()) {
          torch::autograd::grad({y}, wrt, {torch::ones_like(y)}, /*retain_graph=*/false, /*create_graph=*/false,
                                /*allow_unused=*/true);
        }
      }
    }
    side.synchronize();

    c.static_input = input.detach().clone().requires_grad_(input_grad);
    if (pool) {
      c.forward_graph.capture_begin(*pool, cudaStreamCaptureModeThreadLocal);
    } else {
      c.forward_graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
    }
    c.static_output = stack.forward(c.static_input);
    c.forward_graph.capture_end();
    pool = c.forward_graph.pool();

    c.static_grad_output = torch::zeros_like(c.static_output);
    std::vector<torch::Tensor> wrt;
    if (input_grad) wrt.push_back(c.static_input);
    wrt.insert(wrt.end(), params.begin(), params.end());
    c.backward_graph.capture_begin(*pool, cudaStreamCaptureModeThreadLocal);
    auto grads = torch::autograd::grad({c.static_output}, wrt, {c.static_grad_output}, /*retain_graph=*/false,
                                       /*create_graph=*/false, /*allow_unused=*/true);
    const std::size_t offset = input_grad ? 1 : 0;
    std::vector<torch::Tensor> targets, values;
    for (std::size_t k = 0; k < params.size(); ++k) {
      if (!grads[k + offset].defined()) continue;
      targets.push_back(grad_buffers[k]);
      values.push_back(grads[k + offset]);
    }
    if (!targets.empty()) torch::_foreach_add_(targets, values);
    if (input_grad) c.static_grad_input = grads[0];
    c.backward_graph.capture_end();
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format(
        "cuda_graphs: capturing the forward and backward of a training input of shape {} failed: {}\nSomething "
        "in the model cannot run inside a CUDA graph (a host synchronisation, a value read on the host, an "
        "operation CUDA refuses during capture); set cuda_graphs=false",
        signature_of(input), e.what()));
  }
  at::cuda::CUDAEvent done;
  done.record(side);
  done.block(current);
  auto key = signature_of(input);
  return *captured.emplace(std::move(key), std::move(entry)).first->second;
}

CudaGraphedStack::CudaGraphedStack(std::shared_ptr<LayerStack> stack, CudaGraphOptions options)
    : stack_(std::move(stack)), impl_(std::make_unique<Impl>()) {
  if (!stack_) throw std::invalid_argument("CudaGraphedStack: the layer stack is null");
  std::optional<torch::Device> device;
  for (const auto& p : stack_->parameters()) {
    if (!device) device = p.device();
  }
  if (!device) throw std::invalid_argument("CudaGraphedStack: the layer stack has no parameters to tell its device");
  if (auto why = cuda_graphs_unavailable_reason(*device)) throw std::invalid_argument("cuda_graphs: " + *why);
  if (options.warmup_iterations() < 1 || options.max_shapes() < 1) {
    throw std::invalid_argument(fmt::format("CudaGraphOptions: warmup_iterations ({}) and max_shapes ({}) must be >= 1",
                                            options.warmup_iterations(), options.max_shapes()));
  }
  impl_->options = options;
  for (const auto& p : stack_->parameters()) {
    if (!p.requires_grad()) continue;
    impl_->params.push_back(p);
    impl_->grad_buffers.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
  }
  impl_->anchor = torch::zeros({}, torch::TensorOptions().device(*device)).requires_grad_(true);
}

CudaGraphedStack::~CudaGraphedStack() = default;

torch::Tensor CudaGraphedStack::forward(const torch::Tensor& input) {
  if (!torch::GradMode::is_enabled() || !stack_->is_training()) return stack_->forward(input);
  if (!input.is_cuda()) {
    throw std::invalid_argument(fmt::format("cuda_graphs: the input is on {}; the graphed model runs on GPUs",
                                            input.device().str()));
  }
  if (impl_->pending && !impl_->pending->expired()) {
    throw std::logic_error(
        "cuda_graphs: a training forward ran before the previous one's backward; graph replays share their "
        "activations, so each forward's backward must come first (gradient accumulation and a one-stage pipeline's "
        "1F1B do this; a schedule that holds several microbatches cannot use cuda_graphs)");
  }
  auto it = impl_->captured.find(signature_of(input));
  Captured& captured = it != impl_->captured.end() ? *it->second : impl_->capture(*stack_, input);
  auto output = GraphReplay::apply(input, impl_->anchor, impl_.get(), &captured);
  impl_->pending.emplace(output.grad_fn());
  return output;
}

int64_t CudaGraphedStack::captured_shapes() const { return static_cast<int64_t>(impl_->captured.size()); }
int64_t CudaGraphedStack::forward_replays() const { return impl_->replays; }

#else  // CPU build: the class exists, and says why it cannot run.

struct CudaGraphedStack::Impl {};

CudaGraphedStack::CudaGraphedStack(std::shared_ptr<LayerStack> stack, CudaGraphOptions options)
    : stack_(std::move(stack)) {
  (void)options;
  throw std::invalid_argument("cuda_graphs: " + *cuda_graphs_unavailable_reason(torch::Device(torch::kCPU)));
}
CudaGraphedStack::~CudaGraphedStack() = default;
torch::Tensor CudaGraphedStack::forward(const torch::Tensor& input) { return stack_->forward(input); }
int64_t CudaGraphedStack::captured_shapes() const { return 0; }
int64_t CudaGraphedStack::forward_replays() const { return 0; }

#endif

}  // namespace colo::nn
