#pragma once

// What the multi-rank tests share (one header, so that no two test files define a helper under
// the same name: the CUDA build compiles them as one unity translation unit): a tiny ViT, the
// same global batches on every rank, each rank's shard of them, plugins made on the world, the
// trajectory of a boosted run, and the error measures the tolerances are stated in. Each test
// file keeps what is its own: its plugin options and its single-process reference run.
#include <colo/booster/booster.h>
#include <colo/booster/plugin.h>
#include <colo/dist/process_group.h>
#include <colo/nn/layer.h>
#include <colo/nn/layer_stack.h>
#include <colo/nn/shard_spec.h>
#include <colo/nn/vit_config.h>

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace colo::test {

// The shape of a plugin-equivalence run: kSteps steps of kPerRankBatch samples per rank, at kLr.
constexpr int64_t kPerRankBatch = 4;
constexpr int kSteps = 5;
constexpr double kLr = 1e-3;
// Losses and weights against the single-process reference in fp32: the runs differ only in the
// order of floating-point sums (and the Adam kernel), ~1e-7 per step (low_level_zero_test.cpp).
constexpr double kFp32Tolerance = 1e-5;
// bf16 against the fp32 reference: losses, and update_error() of the weights; derived where they
// are used, in low_level_zero_test.cpp (Bf16TracksTheFp32Reference).
constexpr double kBf16LossTolerance = 5e-3;
constexpr double kBf16UpdateTolerance = 0.1;

// Adam's epsilon in the equivalence tests: an Adam update's sensitivity to its gradient is at most
// lr / eps, and gradients that are pure rounding noise (zero in exact arithmetic) would otherwise
// get full-size updates of random sign (low_level_zero_test.cpp measures it).
constexpr double kAdamEps = 1e-3;
// torch's AdamW at kLr with kAdamEps.
std::shared_ptr<torch::optim::Optimizer> conditioned_adamw(nn::LayerStack& model, double weight_decay = 0.01);

// 16×16 images, patch 8, 2 blocks of width 32, 10 classes: seconds per test on a CPU.
nn::ViTConfig tiny_vit();
// tiny_vit() (or `config`) initialised from `seed`, on this rank's device.
std::shared_ptr<nn::LayerStack> make_vit(uint64_t seed = 7);
std::shared_ptr<nn::LayerStack> make_vit(const nn::ViTConfig& config, uint64_t seed);

// The plugin `name` from the registry, on `group` (the world by default) and this rank's device.
std::shared_ptr<Plugin> make_plugin(const std::string& name, const PluginOptions& options,
                                    std::shared_ptr<dist::ProcessGroup> group = nullptr);

torch::Tensor cross_entropy(const torch::Tensor& output, const torch::Tensor& target);

// `n` global batches of `global_batch` images and labels, the same on every rank (from `seed`).
struct GlobalBatches {
  std::vector<torch::Tensor> images, labels;
};
GlobalBatches make_batches(int n, int64_t global_batch, uint64_t seed = 11);

// The grid modes' test ViT (2D, 2.5D and 3D at q = 2): image 16, patch 8 (5 tokens), width 16
// (q³ = 8 divides it), 2 blocks of 4 heads, MLP 32, 10 classes, no dropout.
nn::ViTConfig grid_test_vit();
// `config`'s ViT with every parameter re-filled at random (a fresh one has constant biases,
// LayerNorm weights of one, zero tokens: a cut in the wrong place could pass unseen on
// constants), the same on every rank, on the test's device.
std::shared_ptr<nn::LayerStack> randomised_vit(const nn::ViTConfig& config, uint64_t seed = 5);

// Every rank's `local`, in `group`'s rank order.
std::vector<torch::Tensor> pieces_over(const torch::Tensor& local, dist::ProcessGroup& group);
// The whole tensor from the tp group's pieces of a parameter cut by `cuts`, as a checkpoint reads
// them (per_stage_checkpoint_io): the group's first pieces_of ranks hold the distinct pieces.
torch::Tensor whole_from_pieces(const torch::Tensor& local, const std::vector<nn::ShardSpec>& cuts,
                                dist::ProcessGroup& tp);

// A grid mode's sharded ViT against the same ViT in one process: `sharded` (a copy of
// `reference`'s weights, sharded over `tp`) and `reference` each run one forward and backward of
// cross-entropy on `images` and `labels`; the logits (relative `logits_tolerance`), the loss
// (1e-6), every gradient (1e-5; a replaced parameter's whole from its pieces), and the gradient
// norm from the cuts (amp::global_grad_norm's pieces: each piece counted once) must agree, and
// every block's 12 replaced parameters must record their cuts. `each_cut`, when given, is called
// with every replaced parameter's local gradient, its whole reference gradient, its cuts and name
// (a mode's own checks: 2.5D's copies equal over depth).
struct ShardedVitCheck {
  double logits_tolerance = 1e-6;
  std::function<void(const torch::Tensor& local, const torch::Tensor& want, const std::vector<nn::ShardSpec>& cuts,
                     const std::string& name)>
      each_cut;
};
// A grid mode's shard() refusing grid_test_vit() with 33 MLP hidden units (q = 2 does not divide
// them) with exactly `says`, before it changes anything: the parameters keep their shapes and no
// cuts are recorded.
void expect_odd_mlp_refused_and_left_whole(const std::function<void(nn::LayerStack&)>& shard, const std::string& says);

void expect_sharded_vit_equals_one_process(nn::LayerStack& sharded, nn::LayerStack& reference,
                                           std::shared_ptr<dist::ProcessGroup> tp, const torch::Tensor& images,
                                           const torch::Tensor& labels, const ShardedVitCheck& check = {});

// Rank `rank`'s contiguous slice of a global batch split over `size` ranks; without them, this
// rank's slice over the world.
torch::Tensor shard(const torch::Tensor& global, int rank, int size);
torch::Tensor shard(const torch::Tensor& global);

// The world cut into groups of `size` consecutive ranks (size must divide the world size): the
// group holding this rank. Each is a job of its own for a test of `size` ranks.
std::shared_ptr<dist::ProcessGroup> consecutive_group(int size, const std::string& name);

// The mean of `local` over `group` (the world by default).
double global_mean(double local, dist::ProcessGroup& group);
double global_mean(double local);

// A directory every rank knows, for checkpoints: rank 0 makes it and passes its name through the
// store under `key` and a call count (a key may recur, in a loop). remove_shared_directory waits for every rank first.
std::string shared_directory(const std::string& key);
void remove_shared_directory(const std::string& path);

// max|got - want| / max|want|: one number per tensor, insensitive to entries that are near zero.
double relative_error(const torch::Tensor& got, const torch::Tensor& want);

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;
std::map<std::string, torch::Tensor> named_state(const NamedTensors& state);

// Checks every parameter of `reference` against the boosted model's full state, tensor by tensor
// (relative_error <= tolerance); returns the largest error.
double expect_weights_near(const ModelWrapper& model, const nn::LayerStack& reference, double tolerance);

// Per step: the global mean loss and the gradient norm before clipping.
struct Trajectory {
  std::vector<double> losses;
  std::vector<double> grad_norms;
};

// Trains through the plugin, each rank on its shard of each global batch.
Trajectory train_boosted(Plugin& plugin, Boosted& b, const GlobalBatches& data);

// Checks the losses step by step (relative error <= tolerance); returns the largest error.
double expect_losses_near(const Trajectory& got, const Trajectory& want, double tolerance);

// y = x * w + b, elementwise, a layer named "layers.<index>.": ops that LibTorch 1.13 has fp16 CPU
// kernels for (the ViT's are missing there), for the fp16 loss-scaler tests.
class ScaleShift : public nn::Layer {
 public:
  ScaleShift(int64_t dim, int index) : prefix_("layers." + std::to_string(index) + ".") {
    w = register_parameter("w", torch::ones({dim}) + 0.1 * torch::randn({dim}));
    b = register_parameter("b", 0.1 * torch::randn({dim}));
  }
  torch::Tensor forward(const torch::Tensor& x) override { return x * w + b; }
  std::string canonical_prefix() const override { return prefix_; }
  torch::Tensor w, b;

 private:
  std::string prefix_;
};

}  // namespace colo::test
