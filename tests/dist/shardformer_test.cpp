// The shardformer's pieces on real tensor-parallel groups: each mapping's forward and backward,
// the parallel linears and the fused qkv split against one colo::nn::linear, sequence
// parallelism's padding, the sharded regions' random streams, and a sharded ViT loading timm
// weights.
#include <colo/booster/booster.h>
#include <colo/booster/plugin_registry.h>
#include <colo/checkpoint/safetensors.h>
#include <colo/files/files.h>
#include <colo/dist/process_group.h>
#include <colo/dist/process_group_mesh.h>
#include <colo/nn/linear.h>
#include <colo/nn/pretrained.h>
#include <colo/nn/vision_transformer.h>
#include <colo/shardformer/parallel_linear.h>
#include <colo/shardformer/rng_tracker.h>
#include <colo/shardformer/sequence_mappings.h>
#include <colo/shardformer/shard_former.h>
#include <colo/shardformer/tp2d_grid.h>
#include <colo/shardformer/vit_25d_policy.h>
#include <colo/shardformer/tp3d_grid.h>
#include <colo/shardformer/vit_3d_policy.h>
#include <colo/shardformer/tp25d_grid.h>
#include <colo/shardformer/tp_mappings.h>
#include <colo/shardformer/vit_2d_policy.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <vector>

#include "dist_test_env.h"
#include "plugin_equivalence.h"

namespace colo::shardformer {
namespace {

using namespace test;

// The tensor-parallel sizes this world can run (each a group of consecutive ranks).
std::vector<int> tp_sizes() {
  std::vector<int> sizes;
  for (int tp : {2, 4}) {
    if (world()->size() % tp == 0) sizes.push_back(tp);
  }
  return sizes;
}

torch::Tensor same_everywhere(std::vector<int64_t> shape, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randn(shape).to(device());
}

void expect_close(const torch::Tensor& got, const torch::Tensor& want, const std::string& what, double tol = 1e-6) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  EXPECT_LE(relative_error(got, want), tol) << what;
}

TEST(Shardformer, EachMappingsForwardAndBackward) {
  for (int tp : tp_sizes()) {
    SCOPED_TRACE(fmt::format("tp {}", tp));
    const auto group = consecutive_group(tp, "sf_maps");
    auto& g = *group;
    const auto full = same_everywhere({3, 5, 4 * tp}, 1);
    const auto mine = full.chunk(tp, -1)[g.rank()];
    // Every rank's upstream gradient differs (rank-dependent), so sums are visible.
    const auto upstream = [&](std::vector<int64_t> shape) {
      return same_everywhere(shape, 100 + g.rank()) ;
    };

    auto x = full.clone().requires_grad_();
    auto y = copy_to_tp(x, g);
    expect_close(y, full, "copy_to_tp forward is the identity");
    auto gy = upstream(y.sizes().vec());
    y.backward(gy);
    auto sum = gy.clone();
    g.all_reduce(sum).wait();
    expect_close(x.grad(), sum, "copy_to_tp backward sums over the ranks");

    auto p = mine.clone().requires_grad_();
    auto r = reduce_from_tp(p, g);
    auto want = mine.clone();
    g.all_reduce(want).wait();
    expect_close(r, want, "reduce_from_tp forward sums");
    auto gr = upstream(r.sizes().vec());
    r.backward(gr);
    expect_close(p.grad(), gr, "reduce_from_tp backward is the identity");

    auto s_in = full.clone().requires_grad_();
    auto s = split_last_dim(s_in, g);
    expect_close(s, mine, "split_last_dim keeps this rank's slice");
    s.backward(torch::ones_like(s));
    // Gathered ones: the whole input's gradient is 1.
    expect_close(s_in.grad(), torch::ones_like(full), "split_last_dim backward gathers");

    auto g_in = mine.clone().requires_grad_();
    auto gathered = gather_last_dim(g_in, g);
    expect_close(gathered, full, "gather_last_dim forward");
    auto gg = same_everywhere(full.sizes().vec(), 7);
    gathered.backward(gg);
    expect_close(g_in.grad(), gg.chunk(tp, -1)[g.rank()], "gather_last_dim backward keeps this rank's slice");
  }
  world()->barrier().wait();
}

TEST(Shardformer, SequenceMappingsPadTokensThatDoNotDivide) {
  for (int tp : tp_sizes()) {
    SCOPED_TRACE(fmt::format("tp {}", tp));
    const auto group = consecutive_group(tp, "sf_seq");
    auto& g = *group;
    constexpr int64_t kTokens = 5;  // not a multiple of 2 or 4
    const int64_t padded = padded_tokens(kTokens, tp);
    const auto full = same_everywhere({2, kTokens, 3}, 2);
    auto x = full.clone().requires_grad_();
    auto share = split_sequence(x, kTokens, g);
    EXPECT_EQ(share.size(1), padded / tp);
    const auto padded_full = torch::cat({full, torch::zeros({2, padded - kTokens, 3}, full.options())}, 1);
    expect_close(share, padded_full.chunk(tp, 1)[g.rank()], "split_sequence: this rank's share of the padded tokens");
    // gather_sequence undoes it exactly, and its backward hands each rank its share of the
    // (identical) gradient, which split_sequence's backward gathers back without the padding.
    auto back = gather_sequence(share, kTokens, g);
    expect_close(back, full, "gather_sequence(split_sequence(x)) == x");
    auto grad = same_everywhere({2, kTokens, 3}, 3);
    back.backward(grad);
    expect_close(x.grad(), grad, "the round trip's gradient is the identity");

    // The pair around a tensor-parallel region: gather for qkv/fc1, reduce-scatter after proj/fc2.
    auto s = share.detach().clone().requires_grad_();
    auto all = gather_sequence_for_tp(s, kTokens, g);
    expect_close(all, full, "gather_sequence_for_tp forward");
    auto partial = same_everywhere({2, kTokens, 3}, 200 + g.rank());
    all.backward(partial);
    auto summed = partial.clone();
    g.all_reduce(summed).wait();
    const auto summed_padded = torch::cat({summed, torch::zeros({2, padded - kTokens, 3}, full.options())}, 1);
    expect_close(s.grad(), summed_padded.chunk(tp, 1)[g.rank()], "its backward reduce-scatters");

    auto p = partial.clone().requires_grad_();
    auto reduced = reduce_scatter_sequence(p, kTokens, g);
    expect_close(reduced, summed_padded.chunk(tp, 1)[g.rank()], "reduce_scatter_sequence forward");
    auto rg = same_everywhere(reduced.sizes().vec(), 300 + g.rank());
    reduced.backward(rg);
    auto everyone = all_gather_along(rg, 1, g).narrow(1, 0, kTokens);
    expect_close(p.grad(), everyone, "its backward all-gathers without the padding");
  }
  world()->barrier().wait();
}

// Y = X·Aᵀ + b through a column-parallel then a row-parallel layer (and the fused qkv split), on
// tp ranks, against the same two layers on one rank: outputs, input gradients and, gathered, the
// weight gradients.
TEST(Shardformer, ParallelLinearsEqualOneLinear) {
  for (int tp : tp_sizes()) {
    for (int64_t parts : {1, 3}) {
      for (bool sequence : {false, true}) {
        SCOPED_TRACE(fmt::format("tp {} parts {} sequence parallel {}", tp, parts, sequence));
        const auto group = consecutive_group(tp, "sf_linear");
        constexpr int64_t kTokens = 7, kIn = 8;
        const int64_t hidden = 4 * tp * parts;
        const auto w1 = same_everywhere({hidden, kIn}, 4), b1 = same_everywhere({hidden}, 5);
        const auto w2 = same_everywhere({kIn, hidden}, 6), b2 = same_everywhere({kIn}, 7);
        const auto x = same_everywhere({2, kTokens, kIn}, 8);
        const auto gy = same_everywhere({2, kTokens, kIn}, 9);

        // One rank.
        auto rw1 = w1.clone().requires_grad_(), rb1 = b1.clone().requires_grad_();
        auto rw2 = w2.clone().requires_grad_(), rb2 = b2.clone().requires_grad_();
        auto rx = x.clone().requires_grad_();
        auto ry = nn::linear(torch::gelu(nn::linear(rx, rw1, rb1)), rw2, rb2);
        ry.backward(gy);

        // tp ranks.
        const auto options = ParallelLinearOptions().parts(parts).sequence_tokens(sequence ? kTokens : 0);
        // A fused column layer's local outputs are this rank's slice of each part ([q_r; k_r; v_r]),
        // not a contiguous block of the full output: the row layer that consumes them takes its
        // input columns in that order (whole-rank blocks of the reordered weight).
        auto in_rank_order = [&](const torch::Tensor& t) {
          std::vector<torch::Tensor> blocks;
          for (int r = 0; r < tp; ++r) blocks.push_back(nn::shard_of(t, nn::ShardSpec{1, parts, tp, r}));
          return torch::cat(blocks, 1);
        };
        ColumnParallelLinear column(w1.clone().requires_grad_(), b1.clone().requires_grad_(), group, options);
        RowParallelLinear row(in_rank_order(w2).requires_grad_(), b2.clone().requires_grad_(), group,
                              ParallelLinearOptions().sequence_tokens(sequence ? kTokens : 0));
        auto px = (sequence ? split_sequence(x, kTokens, *group) : x).detach().clone().requires_grad_();
        auto py = row(torch::gelu(column(px)));
        auto p_gy = sequence ? split_sequence(gy, kTokens, *group) : gy;
        py.backward(p_gy);
        const auto got = sequence ? gather_sequence(py.detach(), kTokens, *group) : py.detach();
        expect_close(got, ry.detach(), "output");
        const auto px_grad = sequence ? gather_sequence(px.grad(), kTokens, *group) : px.grad();
        expect_close(px_grad, rx.grad(), "input gradient", 1e-5);
        auto pieces = [&](const torch::Tensor& local, int64_t dim) {
          return all_gather_along(local, dim, *group).chunk(tp, dim);
        };
        expect_close(nn::unshard(pieces(column->weight.grad(), 0), column->spec()), rw1.grad(), "column weight", 1e-5);
        expect_close(nn::unshard(pieces(column->bias.grad(), 0), column->spec()), rb1.grad(), "column bias", 1e-5);
        expect_close(nn::unshard(pieces(row->weight.grad(), 1), row->spec()), in_rank_order(rw2.grad()), "row weight",
                     1e-5);
        // The row bias is whole; under sequence parallelism each rank has its tokens' part.
        auto bias_grad = row->bias.grad();
        if (sequence) bias_grad = all_reduce_sum(bias_grad, *group);
        expect_close(bias_grad, rb2.grad(), "row bias", 1e-5);
      }
    }
  }
  world()->barrier().wait();
}

TEST(Shardformer, ShardedRegionsDrawTheirOwnMasksAndReplicatedOnesAgree) {
  for (int tp : tp_sizes()) {
    const auto group = consecutive_group(tp, "sf_rng");
    torch::manual_seed(42);  // every rank alike, as a training program seeds
    RngTracker tracker(42, group->rank(), device());
    const auto ones = torch::ones({4096}).to(device());
    torch::Tensor inside;
    {
      nn::RegionRng::Scope scope(&tracker);
      inside = torch::dropout(ones, 0.5, true);
    }
    const auto outside = torch::dropout(ones, 0.5, true);
    // Gather both masks from every rank.
    const auto all_inside = all_gather_along(inside.unsqueeze(0), 0, *group);
    const auto all_outside = all_gather_along(outside.unsqueeze(0), 0, *group);
    for (int r = 1; r < tp; ++r) {
      EXPECT_TRUE(torch::equal(all_outside[r], all_outside[0])) << "replicated region: rank " << r;
      EXPECT_FALSE(torch::equal(all_inside[r], all_inside[0])) << "sharded region: rank " << r;
    }
    // The default stream went on as if the region had drawn nothing.
    torch::manual_seed(42);
    EXPECT_TRUE(torch::equal(torch::dropout(ones, 0.5, true), outside));
  }
  world()->barrier().wait();
}

TEST(Shardformer, ShardedVitLoadsTimmWeightsAndGivesItsLogits) {
  const auto dir = shared_directory("sf_timm");
  const auto config = tiny_vit().num_heads(4).depth(2);
  torch::manual_seed(31);
  auto whole = nn::make_vision_transformer(config);
  {  // every tensor away from its initial value: fresh biases are 0 and LayerNorm weights 1
    torch::NoGradGuard no_grad;
    for (auto& p : whole->parameters()) p.add_(0.05 * torch::randn_like(p));
  }
  whole->eval();
  const auto images = make_batches(1, 3, 12).images[0].cpu();
  const auto want = whole->forward(images);
  // A timm-named checkpoint (colo's canonical names are timm's).
  const auto path = files::join(dir, "timm.safetensors");
  if (world()->rank() == 0) {
    checkpoint::NamedTensors state;
    for (const auto& item : whole->canonical_named_parameters()) state.emplace_back(item.key(), item.value());
    checkpoint::write_safetensors(path, state);
  }
  world()->barrier().wait();
  for (int tp : tp_sizes()) {
    for (bool sequence : {false, true}) {
      SCOPED_TRACE(fmt::format("tp {} sequence parallel {}", tp, sequence));
      const auto group = consecutive_group(tp, "sf_timm");
      torch::manual_seed(77);  // other weights: the load must replace them all
      auto model = nn::make_vision_transformer(config);
      ShardFormer(group, ShardFormerOptions().sequence_parallel(sequence)).shard(*model);
      EXPECT_EQ(model->canonical_shard_specs().size(), 6u * config.depth()) << "qkv w/b, proj w, fc1 w/b, fc2 w";
      nn::load_pretrained(*model, path);
      model->eval();
      expect_close(model->forward(images), want, "logits", 1e-5);
    }
  }
  // The grid modes: the same file into each (load_pretrained slices by the recorded cuts), on 4
  // images: 2D on a 1 x 1 and a 2 x 2 grid (weights in blocks, LayerNorms and biases by column; the
  // batch by grid rows), 2.5D on 2 layers of a 2 x 2 grid (2D's blocks on both layers; the batch
  // by layer and row) and 3D on a 2 x 2 x 2 cube (weights, LayerNorms and the residual-side biases
  // in q³ pieces, qkv's and fc1's biases by k; the batch in q² row blocks), one image a row block.
  const auto four = make_batches(1, 4, 12).images[0].cpu();
  const auto want_four = whole->forward(four);
  const auto loads_timm = [&](int ranks, const std::string& label, uint64_t seed,
                              const std::function<void(nn::LayerStack&, std::shared_ptr<dist::ProcessGroup>)>& shard) {
    if (world()->size() % ranks != 0) return;
    SCOPED_TRACE(label);
    const auto group = consecutive_group(ranks, "sf_timm_" + label);
    torch::manual_seed(seed);  // other weights: the load must replace them all
    auto model = nn::make_vision_transformer(config);
    shard(*model, group);
    nn::load_pretrained(*model, path);
    model->eval();
    expect_close(model->forward(four), want_four, "logits", 1e-5);
  };
  for (int side : {1, 2}) {
    loads_timm(side * side, fmt::format("2d on a {0} x {0} grid", side), 78, [](auto& model, auto group) {
      Vit2dSharder(std::make_shared<Tp2dGrid>(group)).shard(model);
    });
  }
  loads_timm(8, "2.5d on 2 layers of a 2 x 2 grid", 79, [](auto& model, auto group) {
    Vit25dSharder(std::make_shared<Tp25dGrid>(group, 2)).shard(model);
  });
  loads_timm(8, "3d on a 2 x 2 x 2 cube", 80, [](auto& model, auto group) {
    Vit3dSharder(std::make_shared<Tp3dGrid>(group)).shard(model);
  });
  remove_shared_directory(dir);
}

TEST(Shardformer, RefusesWhatItCannotShard) {
  if (world()->size() % 4 != 0) GTEST_SKIP() << "needs four ranks";
  const auto group = consecutive_group(4, "sf_refuse");
  torch::manual_seed(1);
  auto three_heads = nn::make_vision_transformer(tiny_vit().embed_dim(48).num_heads(3));
  try {
    ShardFormer(group).shard(*three_heads);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("3 heads do not divide over tp_size=4"), std::string::npos) << e.what();
  }
  auto no_policy = std::make_shared<nn::LayerStack>();
  no_policy->push_back(std::make_shared<ScaleShift>(4, 0));
  try {
    ShardFormer(group).shard(*no_policy);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("colo::shardformer::Policy"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("adding_a_model_policy.md"), std::string::npos) << e.what();
  }
  world()->barrier().wait();
}

}  // namespace
}  // namespace colo::shardformer
