// measure_profile: each layer kind timed on this device at each micro-batch size and tp shard.
#include <colo/amp/precision.h>
#include <colo/nn/classifier_head.h>
#include <colo/nn/deferred_weight_grads.h>
#include <colo/nn/encoder_block.h>
#include <colo/nn/fp8_linear.h>
#include <colo/nn/linear.h>
#include <colo/nn/patch_embedding.h>
#include <colo/optim/hybrid_adam.h>
#include <colo/planner/profiler.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <cmath>

#include "profiler_timing.h"

namespace colo::planner {
namespace {

using detail::marginal_seconds;
using detail::median;
using detail::seconds_now;
using detail::synchronize;

// One rank's piece of a tensor-parallel linear, computed locally: its shard of the weight, and
// under sequence parallelism the local copies the communication would leave (a column-parallel
// input gathered from 1/parts of the tokens, a row-parallel output cut to 1/parts of them). The
// collectives themselves are the communication model's.
class ShardLinearImpl : public torch::nn::Module {
 public:
  ShardLinearImpl(int64_t in, int64_t out, bool bias, int gather_parts, int scatter_parts, int64_t tokens, bool fp8)
      : gather_(gather_parts), scatter_(scatter_parts), tokens_(tokens), fp8_(fp8) {
    weight = register_parameter("weight", torch::randn({out, in}) * 0.02);
    if (bias) this->bias = register_parameter("bias", torch::zeros({out}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto input = x;
    if (gather_ > 1) input = torch::cat(std::vector<torch::Tensor>(static_cast<std::size_t>(gather_), x), 1).narrow(1, 0, tokens_);
    auto y = fp8_ ? nn::fp8_linear(input, weight, bias) : nn::linear(input, weight, bias);
    if (scatter_ > 1) {
      const int64_t share = (tokens_ + scatter_ - 1) / scatter_;
      y = torch::constant_pad_nd(y, {0, 0, 0, share * scatter_ - tokens_}).narrow(1, 0, share).contiguous();
    }
    return y;
  }
  torch::Tensor weight;
  torch::Tensor bias;

 private:
  int gather_, scatter_;
  int64_t tokens_;
  bool fp8_;
};
TORCH_MODULE(ShardLinear);

// Encoder blocks in one call, as a pipeline stage runs them: each call's fixed costs are shared
// by the chain, as they are by a stage's blocks (ProfileOptions::blocks_per_call). Checkpointed,
// the chain keeps only its input and recomputes all of it: per block the same work as blocks
// checkpointed one by one.
class BlockChain : public nn::Layer {
 public:
  explicit BlockChain(std::vector<std::shared_ptr<nn::Layer>> blocks) : blocks_(std::move(blocks)) {
    for (std::size_t i = 0; i < blocks_.size(); ++i) register_module(std::to_string(i), blocks_[i]);
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    auto y = x;
    for (auto& block : blocks_) y = block->forward(y);
    return y;
  }

 private:
  std::vector<std::shared_ptr<nn::Layer>> blocks_;
};

struct Built {
  std::shared_ptr<nn::Layer> layer;
  std::vector<int64_t> input_shape;  // per sample
  bool input_grad = true;
  int blocks = 1;  // layers chained in `layer`: its times are divided by this
};

Built build_one(const std::string& kind, const nn::ViTConfig& c, int tp, bool sp, bool fp8) {
  Built b;
  const int64_t tokens = c.num_tokens();
  if (kind == "patch_embedding") {
    b.layer = std::make_shared<nn::PatchEmbedding>(c);
    b.input_shape = {c.in_channels(), c.image_size(), c.image_size()};
    b.input_grad = false;
  } else if (kind == "head") {
    b.layer = std::make_shared<nn::ClassifierHead>(c);
    b.input_shape = {tokens, c.embed_dim()};
  } else {
    auto block = std::make_shared<nn::EncoderBlock>(c, 0);
    const int parts = sp ? tp : 1;
    if (tp > 1) {
      const int64_t d = c.embed_dim(), m = c.mlp_hidden_dim();
      block->replace_submodule("attn.qkv", torch::nn::AnyModule(ShardLinear(d, 3 * d / tp, c.qkv_bias(), parts, 1, tokens, fp8)));
      block->replace_submodule("attn.proj", torch::nn::AnyModule(ShardLinear(d / tp, d, true, 1, parts, tokens, fp8)));
      block->replace_submodule("mlp.fc1", torch::nn::AnyModule(ShardLinear(d, m / tp, true, parts, 1, tokens, fp8)));
      block->replace_submodule("mlp.fc2", torch::nn::AnyModule(ShardLinear(m / tp, d, true, 1, parts, tokens, fp8)));
    }
    b.layer = block;
    b.input_shape = {sp ? (tokens + tp - 1) / tp : tokens, c.embed_dim()};
  }
  return b;
}

// `kind` as measured: encoder blocks `chain` at a time, the patch embedding and the head alone
// (a stage holds one of each at most).
Built build(const std::string& kind, const nn::ViTConfig& c, int tp, bool sp, bool fp8, int chain) {
  if (kind != "encoder_block" || chain <= 1) return build_one(kind, c, tp, sp, fp8);
  std::vector<std::shared_ptr<nn::Layer>> blocks;
  Built first;
  for (int i = 0; i < chain; ++i) {
    auto one = build_one(kind, c, tp, sp, fp8);
    if (i == 0) first = one;
    blocks.push_back(one.layer);
  }
  first.layer = std::make_shared<BlockChain>(std::move(blocks));
  first.blocks = chain;
  return first;
}

// The encoder blocks chained per call (0: 4 on a GPU, 1 on the CPU).
int blocks_per_call(const ProfileOptions& o) {
  return o.blocks_per_call() > 0 ? o.blocks_per_call() : (o.device().is_cuda() ? 4 : 1);
}

// One measurement of every time a layer has: seconds per call over `k` calls back to back.
struct CallTimes {
  double forward, backward, input_grad, weight_grad, checkpointed_forward, checkpointed_backward;
};

// The calls back to back a measurement makes (--back-to-back; 0: 4 on a GPU, 1 on the CPU).
int calls_back_to_back(const ProfileOptions& o) {
  return o.back_to_back() > 0 ? o.back_to_back() : (o.device().is_cuda() ? 4 : 1);
}

LayerTimes time_layer(const Built& built, int64_t samples, const ProfileOptions& o, c10::ScalarType dtype) {
  auto& layer = *built.layer;
  const auto device = o.device();
  const int k_most = calls_back_to_back(o);
  std::vector<int64_t> shape{samples};
  shape.insert(shape.end(), built.input_shape.begin(), built.input_shape.end());
  std::vector<double> f, bw, bi, w, cf, cb;
  // Every time of `k` calls back to back (the body of one repetition).
  const auto measure = [&](const int k) {
    const auto inputs = [&] {
      std::vector<torch::Tensor> xs;
      for (int i = 0; i < k; ++i)
        xs.push_back(torch::randn(shape, torch::TensorOptions().device(device)).to(dtype).requires_grad_(built.input_grad));
      return xs;
    };
    // Seconds per call of `work(i)` for i < k, launched back to back.
    auto time = [&](auto&& work) {
      synchronize(device);
      const double start = seconds_now();
      for (int i = 0; i < k; ++i) work(i);
      synchronize(device);
      return (seconds_now() - start) / k;
    };
    std::vector<torch::Tensor> x = inputs(), y(static_cast<std::size_t>(k));
    const auto at = [](int i) { return static_cast<std::size_t>(i); };
    layer.zero_grad(true);
    const double forward = time([&](int i) { y[at(i)] = layer.forward(x[at(i)]); });
    const torch::Tensor g = torch::randn_like(y[0]);
    const double backward = time([&](int i) { y[at(i)].backward(g); });

    layer.zero_grad(true);
    x = inputs();
    nn::DeferredWeightGrads deferred;
    double input_grad = 0;
    {
      nn::WeightGradDeferral deferral(deferred);
      for (int i = 0; i < k; ++i) y[at(i)] = layer.forward(x[at(i)]);
      input_grad = time([&](int i) { y[at(i)].backward(g); });
    }
    // The k calls' deferred weight gradients run as one batch: their time over k is one call's.
    const double weight_grad = time([&](int i) {
      if (i == 0) deferred.run();
    });

    layer.zero_grad(true);
    x = inputs();
    layer.set_activation_checkpointing(true);
    const double checkpointed_forward = time([&](int i) { y[at(i)] = layer.run(x[at(i)]); });
    const double checkpointed_backward = time([&](int i) { y[at(i)].backward(g); });
    layer.set_activation_checkpointing(false);
    y.assign(y.size(), torch::Tensor());
    return CallTimes{forward, backward, input_grad, weight_grad, checkpointed_forward, checkpointed_backward};
  };
  for (int r = 0; r < o.warmup() + o.repeats(); ++r) {
    auto t = measure(k_most);
    if (o.marginal()) {
      // The same with one call: what k calls cost beyond it is k - 1 calls' steady cost.
      const auto one = measure(1);
      t = CallTimes{marginal_seconds(t.forward, one.forward, k_most),
                    marginal_seconds(t.backward, one.backward, k_most),
                    marginal_seconds(t.input_grad, one.input_grad, k_most),
                    marginal_seconds(t.weight_grad, one.weight_grad, k_most),
                    marginal_seconds(t.checkpointed_forward, one.checkpointed_forward, k_most),
                    marginal_seconds(t.checkpointed_backward, one.checkpointed_backward, k_most)};
    }
    if (r < o.warmup()) continue;
    f.push_back(t.forward);
    bw.push_back(t.backward);
    bi.push_back(t.input_grad);
    w.push_back(t.weight_grad);
    cf.push_back(t.checkpointed_forward);
    cb.push_back(t.checkpointed_backward);
  }
  const double per = 1.0 / built.blocks;
  LayerTimes t;
  t.samples = samples;
  t.forward = median(f) * per;
  t.backward = median(bw) * per;
  t.input_grad = median(bi) * per;
  t.weight_grad = std::max(median(w) * per, 1e-7);
  t.checkpointed_forward = median(cf) * per;
  t.checkpointed_backward = median(cb) * per;
  return t;
}

OptimizerTimes time_adam(const std::vector<int64_t>& sizes, const c10::Device& device, c10::ScalarType working,
                         int repeats, const std::function<void(const std::string&)>& progress) {
  std::vector<std::pair<double, double>> points;
  for (const auto n : sizes) {
    auto param = torch::zeros({n}, torch::TensorOptions().device(device).dtype(torch::kFloat)).requires_grad_(true);
    param.mutable_grad() = torch::randn({n}, param.options()) * 1e-3;
    optim::HybridAdam adam(std::vector<torch::Tensor>{param}, optim::HybridAdamOptions(1e-4).weight_decay(0.05));
    auto copy = working == torch::kFloat ? torch::Tensor() : torch::empty({n}, param.options().dtype(working));
    std::vector<double> times;
    for (int r = 0; r < repeats + 1; ++r) {
      synchronize(device);
      const double start = seconds_now();
      adam.step();
      if (copy.defined()) {
        torch::NoGradGuard no_grad;
        copy.copy_(param);
      }
      synchronize(device);
      if (r > 0) times.push_back(seconds_now() - start);
    }
    points.emplace_back(static_cast<double>(n), median(times));
    if (progress) progress(fmt::format("adam on {}: {} elements {:.3f} ms", device.str(), n, points.back().second * 1e3));
  }
  const auto [fixed, per_element] = detail::fit_line(points);
  return {fixed, per_element};
}

double copy_gbps(const c10::Device& device, bool to_device) {
  const int64_t n = 64 << 20;  // bytes
  auto host = torch::empty({n}, torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(true));
  auto on_device = torch::empty({n}, torch::TensorOptions().dtype(torch::kUInt8).device(device));
  std::vector<double> times;
  for (int r = 0; r < 6; ++r) {
    synchronize(device);
    const double start = seconds_now();
    if (to_device) {
      on_device.copy_(host, true);
    } else {
      host.copy_(on_device, true);
    }
    synchronize(device);
    if (r > 0) times.push_back(seconds_now() - start);
  }
  return static_cast<double>(n) / median(times) / 1e9;
}

double matmul_rate(const c10::Device& device, c10::ScalarType dtype) {
  const int64_t n = device.is_cuda() ? 8192 : 1024;
  auto a = torch::randn({n, n}, torch::TensorOptions().device(device)).to(dtype);
  auto b = torch::randn({n, n}, torch::TensorOptions().device(device)).to(dtype);
  torch::NoGradGuard no_grad;
  auto c = torch::mm(a, b);
  synchronize(device);
  int iterations = 0;
  const double start = seconds_now();
  double elapsed = 0;
  while (elapsed < 1.0) {
    c = torch::mm(a, b);
    ++iterations;
    if (iterations % 4 == 0) {
      synchronize(device);
      elapsed = seconds_now() - start;
    }
  }
  return 2.0 * static_cast<double>(n) * n * n * iterations / elapsed / 1e12;
}

}  // namespace

double measure_matmul_tflops(const c10::Device& device, c10::ScalarType dtype) { return matmul_rate(device, dtype); }

CostProfile measure_profile(const ProfileOptions& o, const std::function<void(const std::string&)>& progress) {
  const auto& c = o.model();
  c.validate();
  const auto precision = amp::parse_precision(o.precision());
  const auto dtype = amp::to_dtype(precision);
  const bool fp8 = precision == amp::Precision::kFp8;
  if (fp8) {
    const auto why = nn::fp8_unavailable_reason(o.device());
    if (!why.empty()) throw std::invalid_argument("precision fp8 cannot be profiled here: " + why);
  }
  for (int tp : o.tp_sizes()) {
    if (tp < 1 || c.num_heads() % tp != 0 || c.mlp_hidden_dim() % tp != 0) {
      throw std::invalid_argument(fmt::format("tp {} does not divide the model's {} heads and {} hidden units", tp,
                                              c.num_heads(), c.mlp_hidden_dim()));
    }
  }
  if (o.microbatches().empty()) throw std::invalid_argument("give at least one micro-batch size");
  if (o.back_to_back() < 0) {
    throw std::invalid_argument(fmt::format("--back-to-back {}: give the calls to time back to back (1 or more), "
                                            "or 0 for the device's default",
                                            o.back_to_back()));
  }
  if (o.blocks_per_call() < 0 || o.blocks_per_call() > c.depth()) {
    throw std::invalid_argument(fmt::format("--blocks-per-call {}: give the encoder blocks to chain per timed call, "
                                            "from 1 to the model's depth {}, or 0 for the device's default",
                                            o.blocks_per_call(), c.depth()));
  }
  if (o.marginal() && calls_back_to_back(o) < 2) {
    throw std::invalid_argument(fmt::format(
        "--marginal needs 2 or more calls back to back to subtract one call from, and --back-to-back is {} here{}: "
        "give --back-to-back 2 or more, or leave --marginal out",
        calls_back_to_back(o), o.back_to_back() == 0 ? " (the CPU's default: a CPU runs each call to its end)" : ""));
  }
  auto sizes = o.microbatches();
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());

  CostProfile profile;
  profile.device = o.device().str();
  profile.precision = o.precision();
  profile.threads = at::get_num_threads();
  const int chain = std::min<int>(blocks_per_call(o), static_cast<int>(c.depth()));
  profile.blocks_per_call = chain;
  if (progress && chain > 1) progress(fmt::format("encoder blocks timed {} to a call (a block: the call's time / {})", chain, chain));
  profile.model = c;
  torch::manual_seed(0);
  struct Shard {
    std::string kind;
    int tp;
    bool sp;
  };
  std::vector<Shard> shards = {{"patch_embedding", 1, false}, {"head", 1, false}};
  for (int tp : o.tp_sizes()) {
    shards.push_back({"encoder_block", tp, false});
    if (tp > 1 && o.sequence_parallel()) shards.push_back({"encoder_block", tp, true});
  }
  for (const auto& shard : shards) {
    auto built = build(shard.kind, c, shard.tp, shard.sp, fp8, chain);
    built.layer->to(o.device(), dtype);
    if (fp8 && shard.tp == 1) nn::use_fp8_linears(*built.layer, o.device());
    built.layer->train();
    LayerProfile lp;
    lp.layer = shard.kind;
    lp.tp = shard.tp;
    lp.sequence_parallel = shard.sp;
    for (const auto samples : sizes) {
      lp.points.push_back(time_layer(built, samples, o, dtype));
      const auto& t = lp.points.back();
      if (progress) {
        progress(fmt::format("{} tp {}{} batch {}: forward {:.3f} ms, backward {:.3f} ms (B {:.3f} + W {:.3f}), "
                             "checkpointed {:.3f} + {:.3f} ms",
                             shard.kind, shard.tp, shard.sp ? " sp" : "", samples, t.forward * 1e3, t.backward * 1e3,
                             t.input_grad * 1e3, t.weight_grad * 1e3, t.checkpointed_forward * 1e3,
                             t.checkpointed_backward * 1e3));
      }
    }
    profile.layers.push_back(std::move(lp));
  }
  profile.device_optimizer = time_adam(o.optimizer_sizes(), o.device(), dtype, o.repeats(), progress);
  if (o.device().is_cuda()) {
    profile.host_optimizer = time_adam(o.optimizer_sizes(), c10::Device(c10::kCPU), dtype, o.repeats(), progress);
    profile.host_to_device_GBps = copy_gbps(o.device(), true);
    profile.device_to_host_GBps = copy_gbps(o.device(), false);
  }
  profile.matmul_tflops = matmul_rate(o.device(), fp8 ? torch::kBFloat16 : dtype);
  if (progress) progress(fmt::format("matmul: {:.3f} TFLOP/s", profile.matmul_tflops));
  if (o.plugin_overheads()) profile.plugin_overheads = measure_plugin_overheads(o, progress);
  return profile;
}

}  // namespace colo::planner
