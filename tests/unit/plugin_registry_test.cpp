#include <colo/booster/booster.h>
#include <colo/booster/plugin_info.h>
#include <colo/booster/plugin_registry.h>
#include <colo/dist/process_group.h>
#include <colo/dist/process_group_mesh.h>
#include <colo/nn/layer_stack.h>
#include <colo/files/files.h>
#include <colo/optim/optimizer_state.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <string>

#include "scoped_env.h"
#include "temporary_directory.h"
#include "tiny_layer_stack.h"

namespace files = colo::files;

namespace {

// Byte-for-byte copy (std::filesystem::copy_file would bind to the wheel's copy; see colo/files/files.h).
void copy_file(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  std::ofstream out(to, std::ios::binary);
  out << in.rdbuf();
  ASSERT_TRUE(in && out) << "copying " << from << " to " << to;
}

using colo::PluginError;
using colo::PluginRegistry;

const std::string kTestPluginDir = COLO_TEST_PLUGIN_DIR;

std::string test_plugin(const std::string& name) { return kTestPluginDir + "/libcolo_plugin_" + name + ".so"; }

using colo::testing::ScopedEnv;

using TempDir = colo::testing::TemporaryDirectory;

// The message of the PluginError `create` throws; fails the test when it throws nothing or
// something else.
std::string plugin_error(const std::string& name_or_path, const colo::PluginOptions& options = {}) {
  try {
    PluginRegistry::global().create(name_or_path, options, colo::PluginContext{});
  } catch (const PluginError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected a PluginError, got: " << e.what();
    return "";
  }
  ADD_FAILURE() << "create(" << name_or_path << ") did not throw";
  return "";
}

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "missing \"" << (part) << "\" in:\n" << (text)

TEST(PluginRegistry, FindsAPluginByNameOnColoPluginPath) {
  ScopedEnv path("COLO_PLUGIN_PATH", "/nonexistent/colo-plugins:" + kTestPluginDir);
  auto plugin = PluginRegistry::global().create("test_echo", {{"steps", "3"}}, colo::PluginContext{});
  ASSERT_TRUE(plugin);
  EXPECT_EQ(plugin->name(), "test_echo");
}

TEST(PluginRegistry, LoadsAPluginByPath) {
  ScopedEnv path("COLO_PLUGIN_PATH", std::nullopt);
  auto plugin = PluginRegistry::global().create(test_plugin("test_echo"), {}, colo::PluginContext{});
  EXPECT_EQ(plugin->name(), "test_echo");
}

TEST(PluginRegistry, SearchPathIsColoPluginPathThenTheInstalledDirectory) {
  ScopedEnv path("COLO_PLUGIN_PATH", "/a/first::/b/second");
  const auto dirs = PluginRegistry::global().search_path();
  ASSERT_GE(dirs.size(), 3u);
  EXPECT_EQ(dirs[0], "/a/first");
  EXPECT_EQ(dirs[1], "/b/second");
  // The directory next to libcolo_booster.so, which in the build tree is the build tree's
  // plugin directory (listed once).
  EXPECT_EQ(files::canonical_or_absolute(dirs[2]), files::canonical_or_absolute(std::string(COLO_BINARY_DIR) + "/lib/colo/plugins"));
  EXPECT_EQ(dirs.size(), 3u);
}

TEST(PluginRegistry, UnknownNameListsTheSearchedDirectoriesAndTheFoundPlugins) {
  ScopedEnv path("COLO_PLUGIN_PATH", kTestPluginDir);
  const std::string message = plugin_error("test_ecko");
  EXPECT_CONTAINS(message, "plugin 'test_ecko' not found: no libcolo_plugin_test_ecko.so in");
  EXPECT_CONTAINS(message, kTestPluginDir + " (COLO_PLUGIN_PATH)");
  EXPECT_CONTAINS(message, "(installed plugins)");
  EXPECT_CONTAINS(message, "available plugins:\n  test_echo 9.8.7 (" + test_plugin("test_echo") + ")");
  // Broken files on the path are named with the reason, not listed as available.
  EXPECT_CONTAINS(message, "unusable: plugin '" + test_plugin("test_future_api") + "' was built for colo plugin API");
  EXPECT_CONTAINS(message, "unusable: '" + test_plugin("test_not_colo") + "' is not a colo plugin");
  EXPECT_CONTAINS(message, "did you mean 'test_echo'?");
  EXPECT_CONTAINS(message, "set COLO_PLUGIN_PATH to the directory that holds libcolo_plugin_test_ecko.so");
}

TEST(PluginRegistry, MissingFileGivenByPath) {
  const std::string message = plugin_error("/nonexistent/libcolo_plugin_x.so");
  EXPECT_CONTAINS(message, "plugin file '/nonexistent/libcolo_plugin_x.so' does not exist");
}

TEST(PluginRegistry, FileThatCannotBeLoadedReportsTheLoaderError) {
  const std::string message = plugin_error(test_plugin("test_missing_dep"));
  EXPECT_CONTAINS(message, "plugin file '" + test_plugin("test_missing_dep") + "' exists but cannot be loaded: ");
  EXPECT_CONTAINS(message, "libcolo_test_hidden_dependency.so: cannot open shared object file");
  EXPECT_CONTAINS(message, "LD_LIBRARY_PATH");
}

TEST(PluginRegistry, FileThatIsNotASharedLibrary) {
  TempDir dir;
  const std::string file = dir / "libcolo_plugin_garbage.so";
  std::ofstream(file) << "this is not an ELF file\n";
  const std::string message = plugin_error(file);
  EXPECT_CONTAINS(message, "plugin file '" + file + "' exists but cannot be loaded: ");
  EXPECT_CONTAINS(message, "the file is not a shared library");
}

TEST(PluginRegistry, LibraryWithoutTheColoEntryIsNotAPlugin) {
  const std::string message = plugin_error(test_plugin("test_not_colo"));
  EXPECT_EQ(message, "'" + test_plugin("test_not_colo") +
                         "' is not a colo plugin: it does not export colo_plugin_info; build it with "
                         "colo_add_plugin() and declare the plugin class with COLO_PLUGIN(...) "
                         "(colo/booster/plugin_info.h)");
}

TEST(PluginRegistry, WrongApiVersionIsRefusedBeforeTheFactoryRuns) {
  // The fake's factory aborts the process: reaching it would fail this test loudly.
  const std::string message = plugin_error(test_plugin("test_future_api"));
  EXPECT_CONTAINS(message, "was built for colo plugin API version " + std::to_string(colo::kPluginApiVersion + 1000) +
                               ", but this colo has plugin API version " + std::to_string(colo::kPluginApiVersion));
  EXPECT_CONTAINS(message, "rebuild the plugin against this colo");
}

TEST(PluginRegistry, WrongLibTorchVersionIsRefused) {
  const std::string message = plugin_error(test_plugin("test_wrong_torch"));
  EXPECT_CONTAINS(message,
                  std::string("was built against LibTorch 0.0.0-fake, but colo runs LibTorch ") + TORCH_VERSION);
}

TEST(PluginRegistry, ABrokenPluginFoundByNameIsReportedNotSkipped) {
  ScopedEnv path("COLO_PLUGIN_PATH", kTestPluginDir);
  EXPECT_CONTAINS(plugin_error("test_wrong_torch"), "was built against LibTorch 0.0.0-fake");
}

TEST(PluginRegistry, FileNameMustMatchTheDeclaredName) {
  TempDir dir;
  copy_file(test_plugin("test_echo"), dir / "libcolo_plugin_renamed.so");
  ScopedEnv path("COLO_PLUGIN_PATH", dir.path());
  EXPECT_CONTAINS(plugin_error("renamed"), "declares plugin 'test_echo', but its file name says 'renamed'");
}

TEST(PluginRegistry, AvailableListsUsablePluginsOnly) {
  ScopedEnv path("COLO_PLUGIN_PATH", kTestPluginDir);
  const auto found = PluginRegistry::global().available();
  auto echo = std::find_if(found.begin(), found.end(), [](const auto& p) { return p.name == "test_echo"; });
  ASSERT_NE(echo, found.end());
  EXPECT_EQ(echo->path, test_plugin("test_echo"));
  EXPECT_EQ(echo->version, "9.8.7");
  for (const auto& p : found) {
    EXPECT_TRUE(p.name != "test_future_api" && p.name != "test_wrong_torch" && p.name != "test_not_colo" &&
                p.name != "test_missing_dep")
        << p.name;
  }
}

TEST(PluginRegistry, EarlierDirectoriesShadowLaterOnes) {
  TempDir dir;
  copy_file(test_plugin("test_echo"), dir / "libcolo_plugin_test_echo.so");
  ScopedEnv path("COLO_PLUGIN_PATH", dir.path() + ":" + kTestPluginDir);
  const auto found = PluginRegistry::global().available();
  const auto echoes = std::count_if(found.begin(), found.end(), [](const auto& p) { return p.name == "test_echo"; });
  EXPECT_EQ(echoes, 1);
  auto echo = std::find_if(found.begin(), found.end(), [](const auto& p) { return p.name == "test_echo"; });
  ASSERT_NE(echo, found.end());
  EXPECT_EQ(echo->path, dir / "libcolo_plugin_test_echo.so");
}

TEST(PluginRegistry, OptionErrorsFromThePluginPropagateUnchanged) {
  ScopedEnv path("COLO_PLUGIN_PATH", kTestPluginDir);
  try {
    PluginRegistry::global().create("test_echo", {{"steps", "x"}, {"scal", "2"}}, colo::PluginContext{});
    FAIL() << "bad options were accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "test_echo: 2 problems with the plugin options:\n"
              "  - option steps='x' is not an integer\n"
              "  - unknown option 'scal' (did you mean 'scale'?)\n"
              "  valid options: steps (default 1), scale (default 1), mode (default fast)");
  }
  try {
    PluginRegistry::global().create("test_echo", {{"steps", "0"}}, colo::PluginContext{});
    FAIL() << "a violated rule was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "test_echo: steps must be at least 1, got 0");
  }
}

TEST(PluginRegistry, DefaultContextIsAWorldOfOneWithoutANetworkPort) {
  for (const char* launcher_var : {"RANK", "WORLD_SIZE", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "COLO_RDZV_FILE"}) {
    if (std::getenv(launcher_var)) GTEST_SKIP() << launcher_var << " is set: this process is part of a launched job";
  }
  auto& registry = PluginRegistry::global();
  const colo::PluginContext context = registry.default_context();
  ASSERT_TRUE(context.world);
  EXPECT_EQ(context.world->size(), 1);
  EXPECT_EQ(context.world->rank(), 0);
  EXPECT_TRUE(context.world->store_is_file()) << "a job of one should need no TCP port";
  // Once per process.
  EXPECT_EQ(registry.default_context().world.get(), context.world.get());

  ScopedEnv path("COLO_PLUGIN_PATH", kTestPluginDir);
  auto plugin = registry.create("test_echo");
  EXPECT_EQ(plugin->context().world.get(), context.world.get());
}

// A plugin that keeps Plugin's defaults.
class BarePlugin : public colo::Plugin {
 public:
  BarePlugin() : Plugin(colo::PluginContext{}) {}
  std::string name() const override { return "bare"; }
  colo::Boosted boost(colo::BoostInputs) override { return {}; }
};

class NoOpOptimizer : public colo::OptimizerWrapper {
 public:
  void backward(const torch::Tensor&) override {}
  bool step() override { return true; }
  void zero_grad() override {}
  torch::optim::Optimizer& optimizer() override { throw std::logic_error("unused"); }
  FullState full_state() const override { return {}; }
  void load_full_state(const FullState&) override {}
};

// A wrapper whose gradient-sync switch records what it is set to.
class SwitchModel : public colo::ModelWrapper {
 public:
  SwitchModel() : ModelWrapper(std::make_shared<colo::nn::LayerStack>()) {}
  void set_gradient_sync(bool enabled) override { sync = enabled; }
  bool gradient_sync() const override { return sync; }
  bool sync = true;
};

TEST(PluginRegistry, PluginDefaultNoSyncSwitchesTheWrappersOffForItsScope) {
  BarePlugin plugin;
  SwitchModel model;
  NoOpOptimizer optimizer;  // ignores the switch, as wrappers that reduce nothing do
  {
    auto guard = plugin.no_sync(model, optimizer);
    EXPECT_FALSE(model.sync);
    {
      auto nested = plugin.no_sync(model, optimizer);
      EXPECT_FALSE(model.sync);
    }
    EXPECT_FALSE(model.sync) << "an inner guard restores what it found, not 'on'";
  }
  EXPECT_TRUE(model.sync);
}

TEST(PluginRegistry, PluginDefaultsRefuseWhatTheyCannotDo) {
  BarePlugin plugin;
  colo::ModelWrapper model(std::make_shared<colo::nn::LayerStack>());
  NoOpOptimizer optimizer;
  EXPECT_FALSE(plugin.supports_pipeline());
  try {
    plugin.execute_pipeline(torch::zeros({1}), torch::zeros({1}), model, {}, optimizer, {});
    FAIL() << "execute_pipeline did not throw";
  } catch (const std::logic_error& e) {
    EXPECT_CONTAINS(e.what(), "plugin bare has no pipeline parallelism");
    EXPECT_CONTAINS(e.what(), "booster.backward yourself, or load a plugin that implements execute_pipeline");
  }
}

// BarePlugin's boost returns an empty Boosted and its context has no mesh: the Booster must name
// the plugin and the field to set, not hand the Trainer or user code a null layout.
TEST(PluginRegistry, BoostRefusesAPluginThatLeavesTheMeshUnset) {
  colo::Booster booster(std::make_shared<BarePlugin>());
  auto model = colo::test::tiny_layer_stack(7);
  auto optimizer = std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.1));
  try {
    booster.boost(model, optimizer, colo::test::cross_entropy_criterion());
    FAIL() << "boost returned a Boosted without a mesh";
  } catch (const std::runtime_error& e) {
    EXPECT_CONTAINS(e.what(), "plugin 'bare' gave Booster::boost no mesh");
    EXPECT_CONTAINS(e.what(), "set Boosted::mesh");
    EXPECT_CONTAINS(e.what(), "one-rank mesh");
  }
}

TEST(PluginRegistry, BoosterWithoutAPluginSaysWhereToGetOne) {
  try {
    colo::Booster booster(nullptr);
    FAIL() << "a Booster without a plugin was built";
  } catch (const std::invalid_argument& e) {
    EXPECT_CONTAINS(e.what(), "Booster needs a plugin; create one with colo::PluginRegistry");
  }
}

// ---- The out-of-tree example plugin (examples/custom_plugin), built against an installed colo
// by the `custom_plugin_build` CTest fixture, which passes its path in COLO_CUSTOM_PLUGIN.

std::string custom_plugin_path() {
  const char* path = std::getenv("COLO_CUSTOM_PLUGIN");
  return path ? path : "";
}

TEST(CustomPlugin, TrainsLikePlainLibTorchWithClipping) {
  const std::string path = custom_plugin_path();
  if (path.empty()) GTEST_SKIP() << "COLO_CUSTOM_PLUGIN not set (ctest -L install sets it)";
  ASSERT_TRUE(files::exists(path)) << path;

  const double max_norm = 0.05;  // small enough that every step clips
  auto plugin = PluginRegistry::global().create(path, {{"max_grad_norm", std::to_string(max_norm)}});
  EXPECT_EQ(plugin->name(), "single_device");

  auto model = colo::test::tiny_layer_stack(7);
  auto optimizer = std::make_shared<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(1e-2));
  colo::Boosted b = plugin->boost({model, optimizer, colo::test::cross_entropy_criterion(), nullptr, nullptr});
  // Its layout, which Booster::boost requires: one rank.
  ASSERT_TRUE(b.mesh) << "single_device leaves Boosted::mesh unset";
  EXPECT_EQ(b.mesh->describe(), "dp=1 pp=1 tp=1");

  auto reference = colo::test::tiny_layer_stack(7);
  torch::optim::Adam reference_optimizer(reference->parameters(), torch::optim::AdamOptions(1e-2));

  const auto [x, y] = colo::test::tiny_batch();
  for (int step = 0; step < 4; ++step) {
    const auto loss = colo::test::boosted_step(*plugin, b, x, y);

    auto reference_loss = torch::nn::functional::cross_entropy(reference->forward(x), y);
    reference_loss.backward();
    const double reference_norm = torch::nn::utils::clip_grad_norm_(reference->parameters(), max_norm);
    reference_optimizer.step();
    reference_optimizer.zero_grad();

    EXPECT_NEAR(loss.item<double>(), reference_loss.item<double>(), 1e-5) << "step " << step;
    EXPECT_NEAR(b.optimizer->last_grad_norm(), reference_norm, 1e-5 * reference_norm) << "step " << step;
    EXPECT_GT(reference_norm, max_norm) << "the test should exercise clipping";
  }
  // fp32 on both sides; the tolerance covers a GPU (where the plugin runs there) against the CPU.
  const auto trained = model->parameters();
  const auto expected = reference->parameters();
  for (size_t i = 0; i < trained.size(); ++i) {
    EXPECT_TRUE(torch::allclose(trained[i].cpu(), expected[i], 1e-4, 1e-6)) << "parameter " << i;
  }
  for (const auto& p : trained) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(p.grad().abs().sum().item<double>(), 0.0) << "zero_grad zeroes in place";
  }

  // Optimizer state under canonical names, equal to the reference optimizer's.
  const auto state = b.optimizer->full_state();
  std::map<std::string, torch::Tensor> tensors(state.tensors.begin(), state.tensors.end());
  const auto names = model->canonical_parameter_names();
  ASSERT_EQ(names.front(), "l0.fc.weight");
  for (size_t i = 0; i < names.size(); ++i) {
    const auto ref_state = colo::optim::get_param_state(reference_optimizer, i);
    for (const char* key : {"exp_avg", "exp_avg_sq", "step"}) {
      const std::string name = names[i] + "." + key;
      ASSERT_TRUE(tensors.count(name)) << name;
      EXPECT_TRUE(torch::allclose(tensors.at(name).cpu(), ref_state.at(key), 1e-4, 1e-9)) << name;
    }
  }

  // no_sync is a no-op on one device, not an error.
  EXPECT_NO_THROW({ auto guard = plugin->no_sync(*b.model, *b.optimizer); });

  // The plugin links the installed libcolo_booster.so, this program the build tree's: the loader
  // must reuse the one already loaded (same soname), or the process would hold two registries.
  std::ifstream maps("/proc/self/maps");
  std::set<std::string> boosters;
  for (std::string line; std::getline(maps, line);) {
    const auto slash = line.find('/');
    if (slash != std::string::npos && files::file_name(line.substr(slash)) == "libcolo_booster.so") {
      boosters.insert(line.substr(slash));
    }
  }
  EXPECT_EQ(boosters.size(), 1u) << "libcolo_booster.so is loaded from several files";
}

// docs/writing_a_plugin.md's last step, run as printed there (with this build's paths): train_vit
// with the out-of-tree plugin and no other option. It once failed because train_vit passed a
// `precision` option the user never gave, which a plugin that does not declare one refuses.
TEST(CustomPlugin, TheDocumentedTrainVitCommandTrains) {
  const std::string path = custom_plugin_path();
  if (path.empty()) GTEST_SKIP() << "COLO_CUSTOM_PLUGIN not set (ctest -L install sets it)";
  std::ifstream doc(COLO_SOURCE_DIR "/docs/writing_a_plugin.md");
  ASSERT_TRUE(doc) << "docs/writing_a_plugin.md";
  const std::string documented_binary = "build/bin/train_vit ", documented_plugin = "/tmp/custom/libcolo_plugin_single_device.so";
  std::string command;
  for (std::string line; std::getline(doc, line);) {
    if (line.rfind(documented_binary + "--plugin " + documented_plugin, 0) == 0) command = line;
  }
  ASSERT_FALSE(command.empty()) << "the train_vit command is no longer in docs/writing_a_plugin.md";
  command.replace(0, documented_binary.size() - 1, COLO_BINARY_DIR "/bin/train_vit");
  command.replace(command.find(documented_plugin), documented_plugin.size(), path);
  const TempDir dir;
  const std::string out = dir.file("out.txt");
  const int status = std::system(("cd " + dir.path() + " && " + command + " >" + out + " 2>&1").c_str());
  std::ifstream printed(out);
  const std::string text((std::istreambuf_iterator<char>(printed)), std::istreambuf_iterator<char>());
  EXPECT_EQ(status, 0) << command << "\n" << text;
  EXPECT_NE(text.find("single_device"), std::string::npos) << text;
}

TEST(CustomPlugin, RejectsBadOptionsListingEveryProblem) {
  const std::string path = custom_plugin_path();
  if (path.empty()) GTEST_SKIP() << "COLO_CUSTOM_PLUGIN not set (ctest -L install sets it)";
  try {
    PluginRegistry::global().create(path, {{"max_grad_norm", "-1"}, {"max_norm", "1"}}, colo::PluginContext{});
    FAIL() << "bad options were accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_CONTAINS(e.what(), "single_device: 2 problems");
    EXPECT_CONTAINS(e.what(), "max_grad_norm must be >= 0 (0 disables clipping), got -1");
    EXPECT_CONTAINS(e.what(), "unknown option 'max_norm'");
    EXPECT_CONTAINS(e.what(), "valid options: max_grad_norm (default 0)");
  }
}

}  // namespace
