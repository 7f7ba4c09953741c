// colo::optim: HybridAdam against torch::optim::AdamW/Adam, the flat CPU kernel, Lamb against an
// independent double-precision re-implementation, LR schedulers against closed-form values,
// and the uniform lr / state accessors.
#include <colo/compat/torch_compat.h>
#include <colo/optim/adam_step_cpu.h>
#include <colo/optim/cosine_annealing_warmup_lr.h>
#include <colo/optim/hybrid_adam.h>
#include <colo/optim/lamb.h>
#include <colo/optim/linear_warmup_lr.h>
#include <colo/optim/optimizer_state.h>
#include <colo/optim/step_lr.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <vector>

namespace colo::optim {
namespace {

// Parameters of several shapes; the transposed one is not contiguous, so HybridAdam updates it
// with multi-tensor ops while the others take the CPU kernel.
std::vector<torch::Tensor> make_params(int64_t seed, torch::Dtype dtype = torch::kFloat) {
  torch::manual_seed(seed);
  std::vector<torch::Tensor> params{torch::randn({16, 8}, dtype), torch::randn({8}, dtype),
                                    torch::randn({5, 3}, dtype).t(), torch::randn({2, 3, 4}, dtype)};
  for (auto& p : params) p.requires_grad_();
  return params;
}

std::vector<torch::Tensor> clone_params(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> out;
  for (const auto& p : params) {
    // Same strides as the original (a transposed clone stays transposed).
    auto c = torch::empty_strided(p.sizes(), p.strides(), p.options());
    c.copy_(p.detach());
    out.push_back(c.requires_grad_());
  }
  return out;
}

// Gives both parameter lists the same random gradient, different at every step.
void set_same_grads(std::vector<torch::Tensor>& a, std::vector<torch::Tensor>& b, int64_t step) {
  torch::manual_seed(1000 + step);
  for (size_t i = 0; i < a.size(); ++i) {
    auto g = torch::randn(a[i].sizes(), a[i].options());
    a[i].mutable_grad() = g.clone();
    b[i].mutable_grad() = g.clone();
  }
}

void expect_params_near(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b, double atol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double diff = (a[i] - b[i]).abs().max().item<double>();
    EXPECT_LE(diff, atol) << "parameter " << i;
  }
}

TEST(HybridAdam, MatchesTorchAdamW) {
  for (double wd : {0.0, 0.05}) {
    auto ours = make_params(1);
    auto reference = clone_params(ours);
    HybridAdam hybrid(ours, HybridAdamOptions(1e-2).weight_decay(wd).betas({0.8, 0.95}));
    torch::optim::AdamW adamw(reference, torch::optim::AdamWOptions(1e-2).weight_decay(wd).betas({0.8, 0.95}));
    for (int step = 0; step < 10; ++step) {
      set_same_grads(ours, reference, step);
      hybrid.step();
      adamw.step();
    }
    expect_params_near(ours, reference, 1e-6);
    // The weights actually moved (a test that cannot pass by doing nothing).
    EXPECT_GT((ours[0] - make_params(1)[0]).abs().max().item<double>(), 1e-2);
  }
}

TEST(HybridAdam, L2ModeMatchesTorchAdamWithWeightDecay) {
  auto ours = make_params(2);
  auto reference = clone_params(ours);
  HybridAdam hybrid(ours, HybridAdamOptions(1e-2).weight_decay(0.1).adamw_mode(false));
  torch::optim::Adam adam(reference, torch::optim::AdamOptions(1e-2).weight_decay(0.1));
  for (int step = 0; step < 10; ++step) {
    set_same_grads(ours, reference, step);
    hybrid.step();
    adam.step();
  }
  expect_params_near(ours, reference, 1e-6);
}

TEST(HybridAdam, MultiTensorPathMatchesInDouble) {
  // fp64 parameters never take the fp32 CPU kernel.
  auto ours = make_params(3, torch::kDouble);
  auto reference = clone_params(ours);
  HybridAdam hybrid(ours, HybridAdamOptions(1e-2).weight_decay(0.05));
  torch::optim::AdamW adamw(reference, torch::optim::AdamWOptions(1e-2).weight_decay(0.05));
  for (int step = 0; step < 10; ++step) {
    set_same_grads(ours, reference, step);
    hybrid.step();
    adamw.step();
  }
  expect_params_near(ours, reference, 1e-12);
}

TEST(HybridAdam, PerGroupOptionsAndSkippedParams) {
  auto ours = make_params(4);
  auto reference = clone_params(ours);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{ours[0], ours[1]},
                      std::make_unique<HybridAdamOptions>(HybridAdamOptions(1e-2).weight_decay(0.1)));
  groups.emplace_back(std::vector<torch::Tensor>{ours[2], ours[3]},
                      std::make_unique<HybridAdamOptions>(HybridAdamOptions(3e-3)));
  HybridAdam hybrid(std::move(groups));
  std::vector<torch::optim::OptimizerParamGroup> ref_groups;
  ref_groups.emplace_back(
      std::vector<torch::Tensor>{reference[0], reference[1]},
      std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(1e-2).weight_decay(0.1)));
  ref_groups.emplace_back(
      std::vector<torch::Tensor>{reference[2], reference[3]},
      std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(3e-3).weight_decay(0)));
  torch::optim::AdamW adamw(std::move(ref_groups));
  for (int step = 0; step < 6; ++step) {
    set_same_grads(ours, reference, step);
    if (step % 2 == 1) {  // parameter 1 has no gradient every other step
      ours[1].mutable_grad() = torch::Tensor();
      reference[1].mutable_grad() = torch::Tensor();
    }
    hybrid.step();
    adamw.step();
  }
  expect_params_near(ours, reference, 1e-6);
  EXPECT_EQ(get_param_state(hybrid, 1).at("step").item<double>(), 3.0);
  EXPECT_EQ(get_param_state(hybrid, 0).at("step").item<double>(), 6.0);
}

TEST(HybridAdam, RejectsInvalidOptions) {
  auto params = make_params(5);
  EXPECT_THROW(HybridAdam(params, HybridAdamOptions(-1.0)), std::invalid_argument);
  EXPECT_THROW(HybridAdam(params, HybridAdamOptions().betas({1.0, 0.9})), std::invalid_argument);
  EXPECT_THROW(HybridAdam(params, HybridAdamOptions().weight_decay(-0.1)), std::invalid_argument);
}

TEST(HybridAdam, SerializeRoundTripResumesIdentically) {
  auto a_params = make_params(6);
  HybridAdam a(a_params, HybridAdamOptions(1e-2).weight_decay(0.01));
  auto b_params = clone_params(a_params);
  for (int step = 0; step < 3; ++step) {
    set_same_grads(a_params, b_params, step);
    a.step();
  }
  std::stringstream buffer;
  {
    torch::serialize::OutputArchive archive;
    a.save(archive);
    archive.save_to(buffer);
  }
  for (size_t i = 0; i < a_params.size(); ++i) b_params[i].detach().copy_(a_params[i].detach());
  HybridAdam b(b_params, HybridAdamOptions(1e-2).weight_decay(0.01));
  {
    torch::serialize::InputArchive archive;
    archive.load_from(buffer);
    b.load(archive);
  }
  EXPECT_EQ(get_param_state(b, 0).at("step").item<double>(), 3.0);
  for (int step = 3; step < 6; ++step) {
    set_same_grads(a_params, b_params, step);
    a.step();
    b.step();
  }
  expect_params_near(a_params, b_params, 0.0);
}

// ---- adam_step_cpu ---------------------------------------------------------------------------

TEST(AdamStepCpu, FlatShardEqualsHybridAdamBitForBit) {
  auto params = make_params(7);
  params.erase(params.begin() + 2);  // contiguous ones: all take the CPU kernel in HybridAdam
  auto reference = clone_params(params);
  const auto options = HybridAdamOptions(1e-2).weight_decay(0.02);
  HybridAdam hybrid(params, options);

  // The ZeRO-offload layout: one flat fp32 buffer for weights, gradients and both moments.
  std::vector<torch::Tensor> flat_parts;
  for (auto& p : reference) flat_parts.push_back(p.detach().reshape(-1));
  auto flat = torch::cat(flat_parts);
  auto exp_avg = torch::zeros_like(flat);
  auto exp_avg_sq = torch::zeros_like(flat);
  for (int step = 1; step <= 10; ++step) {
    set_same_grads(params, reference, step);
    std::vector<torch::Tensor> grads;
    for (auto& p : reference) grads.push_back(p.grad().reshape(-1));
    adam_step_cpu(flat, torch::cat(grads), exp_avg, exp_avg_sq, step, options);
    hybrid.step();
  }
  int64_t offset = 0;
  for (auto& p : params) {
    EXPECT_TRUE(torch::equal(flat.narrow(0, offset, p.numel()).view(p.sizes()), p.detach()));
    offset += p.numel();
  }
}

TEST(AdamStepCpu, LargeTensorAcrossChunksMatchesTorchAdam) {
  // Larger than one chunk, not a multiple of the vector width: exercises parallel_for and tails.
  torch::manual_seed(8);
  auto p = torch::randn({100003});
  auto ref = p.clone().requires_grad_();
  auto m = torch::zeros_like(p), v = torch::zeros_like(p);
  torch::optim::Adam adam({ref}, torch::optim::AdamOptions(1e-3).weight_decay(0.01));
  const auto options = HybridAdamOptions(1e-3).weight_decay(0.01).adamw_mode(false);
  for (int step = 1; step <= 5; ++step) {
    auto g = torch::randn({100003});
    ref.mutable_grad() = g.clone();
    adam.step();
    adam_step_cpu(p, g, m, v, step, options);
  }
  EXPECT_LE((p - ref.detach()).abs().max().item<double>(), 1e-6);
}

TEST(AdamStepCpu, NoBiasCorrectionFollowsTheFormula) {
  auto p = torch::tensor({1.0f, -2.0f}), g = torch::tensor({0.5f, 0.25f});
  auto m = torch::zeros({2}), v = torch::zeros({2});
  adam_step_cpu(p, g, m, v, 1, HybridAdamOptions(0.1).bias_correction(false).eps(0.0));
  // m = 0.1 g, v = 0.001 g^2, step = lr * m / sqrt(v) = 0.1 * 0.1 / sqrt(0.001) * sign(g)
  const double delta = 0.1 * 0.1 / std::sqrt(0.001);
  EXPECT_NEAR(p[0].item<double>(), 1.0 - delta, 1e-6);
  EXPECT_NEAR(p[1].item<double>(), -2.0 - delta, 1e-6);
}

TEST(AdamStepCpu, RejectsWrongTensors) {
  auto p = torch::zeros({4}), g = torch::zeros({4}), m = torch::zeros({4}), v = torch::zeros({4});
  const HybridAdamOptions o;
  EXPECT_THROW(adam_step_cpu(p, torch::zeros({3}), m, v, 1, o), std::invalid_argument);
  EXPECT_THROW(adam_step_cpu(p, g, m.to(torch::kDouble), v, 1, o), std::invalid_argument);
  EXPECT_THROW(adam_step_cpu(torch::zeros({2, 2}).t(), g, m, v, 1, o), std::invalid_argument);
  EXPECT_THROW(adam_step_cpu(p, g, m, v, 0, o), std::invalid_argument);
}

// ---- Lamb ------------------------------------------------------------------------------------

// Straightforward LAMB in double precision, element by element, written from the paper's
// algorithm (independent of the tensor-op implementation under test).
struct ReferenceLamb {
  double lr, beta1, beta2, eps, wd, max_weight_norm;
  bool bias_correction;
  std::vector<std::vector<double>> m, v;
  int step = 0;

  void update(std::vector<std::vector<double>>& params, const std::vector<std::vector<double>>& grads) {
    ++step;
    if (m.empty()) {
      for (auto& p : params) {
        m.emplace_back(p.size(), 0.0);
        v.emplace_back(p.size(), 0.0);
      }
    }
    for (size_t t = 0; t < params.size(); ++t) {
      auto& w = params[t];
      std::vector<double> u(w.size());
      double w_sq = 0, u_sq = 0;
      for (size_t i = 0; i < w.size(); ++i) {
        m[t][i] = beta1 * m[t][i] + (1 - beta1) * grads[t][i];
        v[t][i] = beta2 * v[t][i] + (1 - beta2) * grads[t][i] * grads[t][i];
        double mh = m[t][i], vh = v[t][i];
        if (bias_correction) {
          mh /= 1 - std::pow(beta1, step);
          vh /= 1 - std::pow(beta2, step);
        }
        u[i] = mh / (std::sqrt(vh) + eps) + wd * w[i];
        w_sq += w[i] * w[i];
        u_sq += u[i] * u[i];
      }
      const double w_norm = std::min(std::sqrt(w_sq), max_weight_norm), u_norm = std::sqrt(u_sq);
      const double ratio = (w_norm > 0 && u_norm > 0) ? w_norm / u_norm : 1.0;
      for (size_t i = 0; i < w.size(); ++i) w[i] -= lr * ratio * u[i];
    }
  }
};

std::vector<double> to_vector(const torch::Tensor& t) {
  auto c = t.detach().to(torch::kDouble).contiguous().view(-1);
  return {c.data_ptr<double>(), c.data_ptr<double>() + c.numel()};
}

TEST(Lamb, MatchesIndependentReference) {
  struct Case {
    bool bias_correction;
    double wd, max_weight_norm;
  };
  for (const auto& c : {Case{false, 0.0, 10.0}, Case{true, 0.01, 10.0}, Case{false, 0.1, 1.5},
                        Case{true, 0.0, std::numeric_limits<double>::infinity()}}) {
    torch::manual_seed(9);
    // A large tensor (norm ~ 16 > 10: clamped), a small one, and an all-zero one (ratio 1).
    std::vector<torch::Tensor> params{torch::randn({16, 16}), torch::randn({7}) * 0.1, torch::zeros({3})};
    for (auto& p : params) p.requires_grad_();
    Lamb lamb(params, LambOptions(0.02)
                          .betas({0.9, 0.99})
                          .eps(1e-6)
                          .weight_decay(c.wd)
                          .bias_correction(c.bias_correction)
                          .max_weight_norm(c.max_weight_norm));
    ReferenceLamb ref{0.02, 0.9, 0.99, 1e-6, c.wd, c.max_weight_norm, c.bias_correction, {}, {}, 0};
    std::vector<std::vector<double>> ref_params;
    for (auto& p : params) ref_params.push_back(to_vector(p));
    for (int step = 0; step < 5; ++step) {
      torch::manual_seed(100 + step);
      std::vector<std::vector<double>> grads;
      for (auto& p : params) {
        p.mutable_grad() = torch::randn(p.sizes());
        grads.push_back(to_vector(p.grad()));
      }
      lamb.step();
      ref.update(ref_params, grads);
    }
    for (size_t t = 0; t < params.size(); ++t) {
      const auto got = to_vector(params[t]);
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], ref_params[t][i], 2e-6)
            << "tensor " << t << " element " << i << " bias_correction " << c.bias_correction << " wd " << c.wd;
      }
    }
  }
}

TEST(Lamb, StateIsAccessibleAndSerializable) {
  auto params = make_params(10);
  Lamb lamb(params, LambOptions(1e-2));
  auto copy = clone_params(params);
  set_same_grads(params, copy, 0);
  lamb.step();
  const auto state = get_param_state(lamb, 0);
  EXPECT_EQ(state.at("step").item<double>(), 1.0);
  EXPECT_TRUE(torch::allclose(state.at("exp_avg"), 0.1 * copy[0].grad()));
  std::stringstream buffer;
  torch::serialize::OutputArchive out;
  lamb.save(out);
  out.save_to(buffer);
  Lamb other(copy, LambOptions(1e-2));
  torch::serialize::InputArchive in;
  in.load_from(buffer);
  other.load(in);
  EXPECT_TRUE(torch::equal(get_param_state(other, 0).at("exp_avg_sq"), state.at("exp_avg_sq")));
}

// ---- learning rates and per-parameter state --------------------------------------------------

TEST(OptimizerState, LrAccessWorksForEveryOptimizer) {
  auto params = make_params(11);
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.1));
  torch::optim::AdamW adamw(params, torch::optim::AdamWOptions(0.2));
  HybridAdam hybrid(params, HybridAdamOptions(0.3));
  Lamb lamb(params, LambOptions(0.4));
  std::vector<torch::optim::Optimizer*> all{&sgd, &adamw, &hybrid, &lamb};
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_DOUBLE_EQ(get_lr(*all[i]), 0.1 * static_cast<double>(i + 1));
    set_lr(*all[i], 0, 0.5);
    EXPECT_EQ(get_lr(*all[i], 0), 0.5);
    EXPECT_THROW(get_lr(*all[i], 1), std::out_of_range);
  }
}

TEST(OptimizerState, KeyMatchesLibTorchs) {
  // torch::optim::AdamW stores its state under LibTorch's own key: finding it proves ours agrees.
  auto params = make_params(12);
  torch::optim::AdamW adamw(params);
  EXPECT_TRUE(get_param_state(adamw, 0).empty());
  for (auto& p : params) p.mutable_grad() = torch::ones_like(p);
  adamw.step();
  EXPECT_EQ(adamw.state().count(compat::optimizer_state_key(params[0])), 1u);
  const auto state = get_param_state(adamw, 3);
  EXPECT_EQ(state.at("step").item<double>(), 1.0);
  EXPECT_EQ(state.at("step").scalar_type(), torch::kFloat);
  EXPECT_TRUE(state.at("exp_avg").is_same(
      static_cast<torch::optim::AdamWParamState&>(*adamw.state().at(compat::optimizer_state_key(params[3])))
          .exp_avg()));
}

TEST(OptimizerState, SetParamStateRoundTripsAcrossOptimizers) {
  // Save HybridAdam's state by index, restore into a fresh HybridAdam: both continue identically.
  auto a_params = make_params(13);
  auto b_params = clone_params(a_params);
  HybridAdam a(a_params, HybridAdamOptions(1e-2));
  for (int step = 0; step < 3; ++step) {
    set_same_grads(a_params, b_params, step);
    a.step();
  }
  for (size_t i = 0; i < a_params.size(); ++i) b_params[i].detach().copy_(a_params[i].detach());
  HybridAdam b(b_params, HybridAdamOptions(1e-2));
  ASSERT_EQ(optimizer_params(a).size(), 4u);
  for (size_t i = 0; i < optimizer_params(a).size(); ++i) set_param_state(b, i, get_param_state(a, i));
  EXPECT_FALSE(get_param_state(b, 0).at("exp_avg").is_same(get_param_state(a, 0).at("exp_avg")));  // copies
  for (int step = 3; step < 5; ++step) {
    set_same_grads(a_params, b_params, step);
    a.step();
    b.step();
  }
  expect_params_near(a_params, b_params, 0.0);

  // HybridAdam state loads into torch's AdamW (same names as PyTorch's state_dict).
  auto c_params = clone_params(a_params);
  torch::optim::AdamW c(c_params, torch::optim::AdamWOptions(1e-2).weight_decay(0));
  for (size_t i = 0; i < 4; ++i) set_param_state(c, i, get_param_state(a, i));
  set_same_grads(a_params, c_params, 9);
  a.step();
  c.step();
  expect_params_near(a_params, c_params, 1e-6);

  // SGD momentum.
  auto d_params = make_params(14);
  torch::optim::SGD sgd(d_params, torch::optim::SGDOptions(0.1).momentum(0.9));
  set_param_state(sgd, 1, {{"momentum_buffer", torch::ones({8})}});
  EXPECT_TRUE(torch::equal(get_param_state(sgd, 1).at("momentum_buffer"), torch::ones({8})));
}

TEST(OptimizerState, SetParamStateReportsBadEntries) {
  auto params = make_params(15);
  HybridAdam opt(params);
  const auto good = std::map<std::string, torch::Tensor>{
      {"step", torch::tensor(2.0)}, {"exp_avg", torch::zeros({8})}, {"exp_avg_sq", torch::zeros({8})}};
  EXPECT_NO_THROW(set_param_state(opt, 1, good));
  EXPECT_EQ(get_param_state(opt, 1).at("step").item<double>(), 2.0);
  auto missing = good;
  missing.erase("exp_avg");
  EXPECT_THROW(set_param_state(opt, 1, missing), std::invalid_argument);
  auto wrong_shape = good;
  wrong_shape["exp_avg_sq"] = torch::zeros({9});
  EXPECT_THROW(set_param_state(opt, 1, wrong_shape), std::invalid_argument);
  auto extra = good;
  extra["momentum_buffer"] = torch::zeros({8});
  EXPECT_THROW(set_param_state(opt, 1, extra), std::invalid_argument);
  EXPECT_THROW(set_param_state(opt, 4, good), std::out_of_range);
  set_param_state(opt, 1, {});
  EXPECT_TRUE(get_param_state(opt, 1).empty());
}

// ---- LR schedulers ---------------------------------------------------------------------------

std::vector<double> run_schedule(LRScheduler& scheduler, torch::optim::Optimizer& optimizer, int steps) {
  std::vector<double> lrs{get_lr(optimizer)};
  for (int i = 0; i < steps; ++i) {
    scheduler.step();
    lrs.push_back(get_lr(optimizer));
    EXPECT_EQ(scheduler.last_lr().at(0), lrs.back());
  }
  return lrs;
}

TEST(CosineAnnealingWarmupLR, WarmupCosineThenStaysAtEtaMin) {
  auto params = make_params(16);
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.1));
  CosineAnnealingWarmupLR scheduler(sgd, /*total_steps=*/10, /*warmup_steps=*/3, /*eta_min=*/0.01);
  // eta_min + (b - eta_min) (1 + cos(pi (t - W) / (T - W))) / 2, computed independently in Python.
  const std::vector<double> expected{0.03333333333333333,
                                     0.06666666666666667,
                                     0.1,
                                     0.1,
                                     0.09554359905560886,
                                     0.08305704108364302,
                                     0.06501344202803415,
                                     0.04498655797196586,
                                     0.026942958916356993,
                                     0.014456400944391143,
                                     0.01,
                                     0.01,
                                     0.01};
  const auto got = run_schedule(scheduler, sgd, 12);
  for (size_t t = 0; t < expected.size(); ++t) EXPECT_NEAR(got[t], expected[t], 1e-15) << "step " << t;
  EXPECT_EQ(scheduler.step_count(), 12);
}

TEST(CosineAnnealingWarmupLR, NoWarmupStartsAtBase) {
  auto params = make_params(17);
  HybridAdam opt(params, HybridAdamOptions(0.2));
  CosineAnnealingWarmupLR scheduler(opt, 4);
  const auto got = run_schedule(scheduler, opt, 5);
  EXPECT_DOUBLE_EQ(got[0], 0.2);
  EXPECT_NEAR(got[2], 0.1, 1e-15);  // halfway: cos(pi/2) = 0
  EXPECT_EQ(got[4], 0.0);
  EXPECT_EQ(got[5], 0.0);
}

TEST(LinearWarmupLR, MatchesColossalAiThenStaysAtZero) {
  auto params = make_params(18);
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.1));
  LinearWarmupLR scheduler(sgd, /*total_steps=*/10, /*warmup_steps=*/3);
  // Colossal-AI's LinearWarmupLR (run in Python) for steps 0..10, then pinned at 0.
  const std::vector<double> expected{0.025,
                                     0.05,
                                     0.07500000000000001,
                                     0.1,
                                     0.08571428571428572,
                                     0.07142857142857144,
                                     0.05714285714285714,
                                     0.04285714285714286,
                                     0.02857142857142857,
                                     0.014285714285714285,
                                     0.0,
                                     0.0,
                                     0.0};
  const auto got = run_schedule(scheduler, sgd, 12);
  for (size_t t = 0; t < expected.size(); ++t) EXPECT_NEAR(got[t], expected[t], 1e-15) << "step " << t;
}

TEST(LRScheduler, DrivesEveryGroupFromItsOwnBase) {
  auto params = make_params(19);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{params[0]},
                      std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(0.1)));
  groups.emplace_back(std::vector<torch::Tensor>{params[1]},
                      std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(0.4)));
  torch::optim::SGD sgd(std::move(groups), torch::optim::SGDOptions(0.1));
  LinearWarmupLR scheduler(sgd, 4, 1);
  EXPECT_DOUBLE_EQ(get_lr(sgd, 0), 0.05);
  EXPECT_DOUBLE_EQ(get_lr(sgd, 1), 0.2);
  scheduler.step();
  scheduler.step();
  EXPECT_DOUBLE_EQ(get_lr(sgd, 0), 0.1 * 2 / 3);
  EXPECT_DOUBLE_EQ(get_lr(sgd, 1), 0.4 * 2 / 3);
  ASSERT_EQ(scheduler.last_lr().size(), 2u);
}

TEST(LRScheduler, StateRoundTripResumesTheSchedule) {
  auto params = make_params(20);
  torch::optim::SGD a_opt(params, torch::optim::SGDOptions(0.1));
  CosineAnnealingWarmupLR a(a_opt, 20, 5, 0.001);
  for (int i = 0; i < 7; ++i) a.step();
  const auto state = a.state_dict();
  EXPECT_EQ(state.at("step_count"), 7.0);
  EXPECT_EQ(state.at("base_lr.0"), 0.1);

  // The resumed optimizer's lr is already the scheduled one (e.g. restored by torch::load):
  // the base rate must come from the state, not from the optimizer.
  torch::optim::SGD b_opt(params, torch::optim::SGDOptions(a_opt.param_groups()[0].options().get_lr()));
  CosineAnnealingWarmupLR b(b_opt, 20, 5, 0.001);
  b.load_state_dict(state);
  EXPECT_EQ(get_lr(b_opt), get_lr(a_opt));
  for (int i = 0; i < 15; ++i) {
    a.step();
    b.step();
    EXPECT_EQ(get_lr(b_opt), get_lr(a_opt));
  }

  auto bad = state;
  bad.erase("step_count");
  EXPECT_THROW(b.load_state_dict(bad), std::invalid_argument);
  bad = state;
  bad["base_lr.1"] = 0.2;
  EXPECT_THROW(b.load_state_dict(bad), std::invalid_argument);
}

TEST(LRScheduler, RebindDrivesAnotherOptimizer) {
  auto params = make_params(21);
  torch::optim::SGD user(params, torch::optim::SGDOptions(0.1));
  LinearWarmupLR scheduler(user, 10, 0);
  scheduler.step();
  HybridAdam wrapped(params, HybridAdamOptions(1.0));
  scheduler.rebind(wrapped);
  EXPECT_DOUBLE_EQ(get_lr(wrapped), 0.09);
  scheduler.step();
  EXPECT_DOUBLE_EQ(get_lr(wrapped), 0.08);
}

TEST(LRScheduler, RejectsInvalidSchedules) {
  auto params = make_params(22);
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.1));
  EXPECT_THROW(CosineAnnealingWarmupLR(sgd, 10, 11), std::invalid_argument);
  EXPECT_THROW(CosineAnnealingWarmupLR(sgd, 0, 0), std::invalid_argument);
  EXPECT_THROW(CosineAnnealingWarmupLR(sgd, 10, -1), std::invalid_argument);
  EXPECT_THROW(CosineAnnealingWarmupLR(sgd, 10, 2, -0.1), std::invalid_argument);
  EXPECT_THROW(LinearWarmupLR(sgd, 5, 6), std::invalid_argument);
  EXPECT_NO_THROW(LinearWarmupLR(sgd, 5, 5));
  EXPECT_NO_THROW(CosineAnnealingWarmupLR(sgd, 5, 5));
}

}  // namespace
// torch.optim.lr_scheduler.StepLR / MultiStepLR's rates (step_size 3, gamma 0.5; milestones 2 and
// 5, gamma 0.1), at each side of every boundary; with warmup, the warmup's rates first and the
// decays still counted from step 0.
TEST(StepLR, DecaysEveryStepSizeAfterTheWarmup) {
  auto params = make_params(21);
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.1));
  colo::optim::StepLR plain(sgd, /*step_size=*/3, /*gamma=*/0.5);
  const std::vector<double> expected{0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025, 0.025, 0.0125};
  const auto got = run_schedule(plain, sgd, 9);
  for (size_t t = 0; t < expected.size(); ++t) EXPECT_NEAR(got[t], expected[t], 1e-15) << "step " << t;
  torch::optim::SGD fresh(params, torch::optim::SGDOptions(0.1));  // base rates are read at construction
  colo::optim::StepLR warm(fresh, 3, 0.5, /*warmup_steps=*/2);
  const auto warmed = run_schedule(warm, fresh, 4);
  const std::vector<double> expected_warm{0.05, 0.1, 0.1, 0.05, 0.05};
  for (size_t t = 0; t < expected_warm.size(); ++t) EXPECT_NEAR(warmed[t], expected_warm[t], 1e-15) << "step " << t;
  EXPECT_THROW(colo::optim::StepLR(sgd, 0), std::invalid_argument);
  EXPECT_THROW(colo::optim::StepLR(sgd, 1, 0.0), std::invalid_argument);
}

TEST(MultiStepLR, DecaysAtEachMilestoneAfterTheWarmup) {
  auto params = make_params(22);
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.1));
  colo::optim::MultiStepLR plain(sgd, {2, 5}, 0.1);
  const std::vector<double> expected{0.1, 0.1, 0.01, 0.01, 0.01, 0.001, 0.001};
  const auto got = run_schedule(plain, sgd, 6);
  for (size_t t = 0; t < expected.size(); ++t) EXPECT_NEAR(got[t], expected[t], 1e-15) << "step " << t;
  torch::optim::SGD fresh(params, torch::optim::SGDOptions(0.1));  // base rates are read at construction
  colo::optim::MultiStepLR warm(fresh, {2, 5}, 0.1, /*warmup_steps=*/3);
  const auto warmed = run_schedule(warm, fresh, 6);
  const std::vector<double> expected_warm{0.1 / 3, 0.2 / 3, 0.1, 0.01, 0.01, 0.001, 0.001};
  for (size_t t = 0; t < expected_warm.size(); ++t) EXPECT_NEAR(warmed[t], expected_warm[t], 1e-15) << "step " << t;
  EXPECT_THROW(colo::optim::MultiStepLR(sgd, {}), std::invalid_argument);
  EXPECT_THROW(colo::optim::MultiStepLR(sgd, {3, 3}), std::invalid_argument);
  EXPECT_THROW(colo::optim::MultiStepLR(sgd, {0, 3}), std::invalid_argument);
}

}  // namespace colo::optim
