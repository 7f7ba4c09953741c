// CheckpointIO in a world of one: sharded and single-file safetensors sets with a JSON index,
// exact round trips, every mismatch reported, corrupt and missing files named, atomic writes.
#include <colo/booster/checkpoint_io.h>
#include <colo/engine/model_wrapper.h>
#include <colo/checkpoint/checkpoint_error.h>
#include <colo/checkpoint/finite_check.h>
#include <colo/checkpoint/sharded_safetensors.h>
#include <colo/nn/vision_transformer.h>
#include <colo/nn/vit_config.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <unistd.h>

#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "damage_safetensors.h"
#include "temporary_directory.h"

namespace colo {
namespace {

using testing::TemporaryDirectory;

std::shared_ptr<nn::LayerStack> tiny_vit(int64_t embed_dim = 32, uint64_t seed = 3) {
  torch::manual_seed(seed);
  return nn::make_vision_transformer(
      nn::ViTConfig().image_size(16).patch_size(8).in_channels(3).num_classes(10).embed_dim(embed_dim).depth(2).num_heads(
          2));
}

// No process group: a job of one writes as rank 0 and needs no barrier.
CheckpointIO checkpoint_io() { return CheckpointIO(nullptr); }

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

void expect_same_state(ModelWrapper& a, ModelWrapper& b) {
  const auto sa = a.full_state();
  const auto sb = b.full_state();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].first, sb[i].first);
    EXPECT_TRUE(torch::equal(sa[i].second, sb[i].second)) << sa[i].first;
  }
}

TEST(CheckpointIO, ShardedModelRoundTripIsExactAndIndexed) {
  TemporaryDirectory dir;
  ModelWrapper saved(tiny_vit(32, 3));
  SaveOptions options;
  options.shard(true);
  options.max_shard_mb(0.02);  // ~20 KB per file: the ~60 KB model spans several files
  checkpoint_io().save_model(saved, dir.path(), options);

  std::ifstream index_file(dir / "model.safetensors.index.json");
  ASSERT_TRUE(index_file.good()) << "no index written";
  const auto index = nlohmann::json::parse(index_file);
  std::set<std::string> shard_files;
  for (const auto& [name, file] : index.at("weight_map").items()) shard_files.insert(file.get<std::string>());
  EXPECT_GE(shard_files.size(), 3u);
  EXPECT_EQ(index.at("weight_map").size(), saved.full_state().size());
  for (const auto& file : shard_files) EXPECT_TRUE(files::exists(dir / file)) << file;
  EXPECT_FALSE(files::exists(dir / "model.safetensors")) << "a single file next to the index would be ambiguous";
  for (const auto& entry : dir.entries()) EXPECT_EQ(entry.find(".tmp"), std::string::npos) << "left over: " << entry;

  ModelWrapper loaded(tiny_vit(32, 99));
  checkpoint_io().load_model(loaded, dir.path());
  expect_same_state(saved, loaded);
}

TEST(CheckpointIO, SingleFileReplacesAnEarlierShardedSet) {
  TemporaryDirectory dir;
  ModelWrapper first(tiny_vit(32, 3));
  SaveOptions sharded;
  sharded.shard(true);
  sharded.max_shard_mb(0.02);
  checkpoint_io().save_model(first, dir.path(), sharded);
  ModelWrapper second(tiny_vit(32, 4));
  checkpoint_io().save_model(second, dir.path());
  EXPECT_TRUE(files::exists(dir / "model.safetensors"));
  EXPECT_FALSE(files::exists(dir / "model.safetensors.index.json")) << "a stale index would shadow the new file";
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"model.safetensors"})) << "the old shards stayed behind";

  ModelWrapper loaded(tiny_vit(32, 99));
  checkpoint_io().load_model(loaded, dir.path());
  expect_same_state(second, loaded);
}

TEST(CheckpointIO, FewerShardsReplaceAnEarlierSetWithoutLeavingItsFiles) {
  TemporaryDirectory dir;
  ModelWrapper first(tiny_vit(32, 3));
  SaveOptions small;
  small.shard(true);
  small.max_shard_mb(0.02);
  auto indexed_files = [&dir] {
    std::ifstream index_file(dir / "model.safetensors.index.json");
    const auto index = nlohmann::json::parse(index_file);
    std::set<std::string> out;
    for (const auto& [name, file] : index.at("weight_map").items()) {
      out.insert(file.get<std::string>());
    }
    return out;
  };
  checkpoint_io().save_model(first, dir.path(), small);
  const auto first_shards = indexed_files();
  // Another set's shards in the same directory are not the model's to remove.
  std::ofstream(dir / "other-00001-of-00002.safetensors") << "x";

  ModelWrapper second(tiny_vit(32, 4));
  SaveOptions large = small;
  large.max_shard_mb(0.04);
  checkpoint_io().save_model(second, dir.path(), large);
  auto expected = indexed_files();
  ASSERT_LT(expected.size(), first_shards.size()) << "the test needs the second save to use fewer shards";
  expected.insert({"model.safetensors.index.json", "other-00001-of-00002.safetensors"});
  const auto entries = dir.entries();
  EXPECT_EQ(std::set<std::string>(entries.begin(), entries.end()), expected);
  ModelWrapper loaded(tiny_vit(32, 99));
  checkpoint_io().load_model(loaded, dir.path());
  expect_same_state(second, loaded);
}

TEST(CheckpointIO, LoadingIntoAnotherConfigurationListsEveryMismatch) {
  TemporaryDirectory dir;
  ModelWrapper saved(tiny_vit(32));
  checkpoint_io().save_model(saved, dir.path());
  ModelWrapper other(tiny_vit(48));
  const std::string message = error_of([&] { checkpoint_io().load_model(other, dir.path()); });
  // Every tensor whose shape depends on the width is named, with both shapes.
  EXPECT_NE(message.find("cls_token (checkpoint [1, 1, 32], model [1, 1, 48])"), std::string::npos) << message;
  EXPECT_NE(message.find("head.weight (checkpoint [10, 32], model [10, 48])"), std::string::npos) << message;
  EXPECT_NE(message.find("blocks.1.mlp.fc2.bias"), std::string::npos) << message;
  EXPECT_NE(message.find("same configuration"), std::string::npos) << message;
}

TEST(CheckpointIO, MissingAndUnexpectedNamesAndDtypesAreReported) {
  ModelWrapper model(tiny_vit());
  auto state = model.full_state();
  state.erase(state.begin());  // drop the first tensor
  state.emplace_back("blocks.9.extra", torch::zeros({2}));
  const std::string missing_name = model.full_state().front().first;
  const std::string message = error_of([&] { model.load_full_state(state); });
  EXPECT_NE(message.find("1 missing [" + missing_name + "]"), std::string::npos) << message;
  EXPECT_NE(message.find("1 unexpected [blocks.9.extra]"), std::string::npos) << message;

  auto integer_state = model.full_state();
  integer_state.back().second = integer_state.back().second.to(torch::kInt64);
  const std::string dtype_message = error_of([&] { model.load_full_state(integer_state); });
  EXPECT_NE(dtype_message.find("(checkpoint Long, model Float)"), std::string::npos) << dtype_message;
}

TEST(CheckpointIO, MissingAndCorruptFilesAreNamed) {
  TemporaryDirectory dir;
  ModelWrapper model(tiny_vit());
  const std::string none = error_of([&] { checkpoint_io().load_model(model, dir.path()); });
  EXPECT_NE(none.find(dir.path()), std::string::npos) << none;

  SaveOptions sharded;
  sharded.shard(true);
  sharded.max_shard_mb(0.02);
  checkpoint_io().save_model(model, dir.path(), sharded);
  std::ifstream index_file(dir / "model.safetensors.index.json");
  const auto index = nlohmann::json::parse(index_file);
  const std::string shard_name = index.at("weight_map").at("blocks.0.attn.qkv.weight").get<std::string>();
  const std::string shard = dir / shard_name;
  ASSERT_TRUE(files::exists(shard)) << shard;
  const auto size = files::file_size(shard);
  ASSERT_EQ(::truncate(shard.c_str(), static_cast<off_t>(size / 2)), 0);
  const std::string corrupt = error_of([&] { checkpoint_io().load_model(model, dir.path()); });
  EXPECT_NE(corrupt.find(shard_name), std::string::npos) << corrupt;

  files::remove(shard);
  const std::string gone = error_of([&] { checkpoint_io().load_model(model, dir.path()); });
  EXPECT_NE(gone.find(shard_name), std::string::npos) << gone;
}

// Four bytes of a saved model set to NaN (a damaged disk block, or a save from a diverged run)
// once resumed silently and trained at loss NaN to the end. Now the load is refused, naming the
// file and the tensor, and the model keeps its weights; for a sharded set, the shard's file.
TEST(CheckpointIO, NonFiniteValueIsRefusedNamingFileAndTensorAndLoadsNothing) {
  for (const bool shard : {false, true}) {
    SCOPED_TRACE(shard ? "sharded" : "one file");
    TemporaryDirectory dir;
    ModelWrapper saved(tiny_vit(32, 3));
    SaveOptions options;
    options.shard(shard);
    options.max_shard_mb(0.02);
    checkpoint_io().save_model(saved, dir.path(), options);
    std::string file = "model.safetensors";
    if (shard) {
      std::ifstream index_file(dir / "model.safetensors.index.json");
      file = nlohmann::json::parse(index_file).at("weight_map").at("blocks.1.mlp.fc1.weight").get<std::string>();
    }
    testing::overwrite_with_nan(dir / file, "blocks.1.mlp.fc1.weight", 7);

    ModelWrapper target(tiny_vit(32, 99));
    const auto before = target.full_state();
    const std::string message = error_of([&] { checkpoint_io().load_model(target, dir.path()); });
    EXPECT_NE(message.find(dir / file + ": tensor 'blocks.1.mlp.fc1.weight' holds 1 non-finite value"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("the first, nan, at flat index 7"), std::string::npos) << message;
    const auto after = target.full_state();
    for (std::size_t i = 0; i < before.size(); ++i) {
      EXPECT_TRUE(torch::equal(before[i].second, after[i].second)) << "a refused load changed " << before[i].first;
    }
  }
}

// The optimizer's state goes through the same loader (load_optimizer reads the "optimizer" set).
TEST(CheckpointIO, NonFiniteOptimizerStateIsRefused) {
  TemporaryDirectory dir;
  checkpoint::save_safetensors_set(dir.path(), "optimizer",
                                   {{"state.0.exp_avg", torch::ones({4})}, {"state.0.step", torch::ones({})}});
  testing::overwrite_with_nan(dir / "optimizer.safetensors", "state.0.exp_avg", 2);
  const std::string message = error_of([&] { checkpoint::load_safetensors_set(dir.path(), "optimizer"); });
  EXPECT_NE(message.find("optimizer.safetensors: tensor 'state.0.exp_avg' holds 1 non-finite value"), std::string::npos)
      << message;
}

TEST(CheckpointIO, RequireFiniteChecksEveryFloatingDtypeAndCountsTheBadValues) {
  const float inf = std::numeric_limits<float>::infinity();
  for (const auto dtype : {torch::kFloat32, torch::kFloat64, torch::kFloat16, torch::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto bad = torch::tensor({1.0f, -inf, 2.0f, inf}).to(dtype);
    const std::string message = error_of([&] {
      checkpoint::require_finite({{"fine", torch::ones({3}, dtype)}, {"w", bad}}, "file.safetensors");
    });
    EXPECT_NE(message.find("file.safetensors: tensor 'w' holds 2 non-finite values (NaN or infinity) of 4; the "
                           "first, -inf, at flat index 1"),
              std::string::npos)
        << message;
  }
  // Integers cannot be NaN; an undefined tensor is some other check's business.
  EXPECT_NO_THROW(checkpoint::require_finite(
      {{"i", torch::arange(5)}, {"b", torch::ones({2}, torch::kBool)}, {"u", torch::Tensor()}}, "x"));
}

TEST(CheckpointIO, NonPositiveShardSizeIsRejected) {
  TemporaryDirectory dir;
  ModelWrapper model(tiny_vit());
  SaveOptions options;
  options.shard(true);
  options.max_shard_mb(0);
  EXPECT_NE(error_of([&] { checkpoint_io().save_model(model, dir.path(), options); }).find("max_shard_mb"),
            std::string::npos);
}

}  // namespace
}  // namespace colo
