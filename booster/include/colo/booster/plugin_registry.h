#pragma once

#include <colo/booster/plugin.h>
#include <colo/booster/plugin_options.h>

#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace colo {

struct MemoryPlan;
struct MemoryPlanInputs;
struct PluginInfo;

// A plugin could not be found or loaded. The message says which, where colo looked, and what to
// change (not found / not a colo plugin / wrong API version / wrong LibTorch).
class PluginError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A plugin found on the search path.
struct PluginListing {
  std::string name;
  std::string path;
  std::string version;
};

// Finds, checks and instantiates plugins (Boost.DLL). A name is looked up as
// libcolo_plugin_<name>.so in: the directories of COLO_PLUGIN_PATH (':'-separated), the installed
// plugin directory next to libcolo_booster.so, then the build tree. Anything containing '/' or
// ending in ".so" is a path. Before calling into a library, the registry reads its
// `colo_plugin_info` entry and checks the API version and the LibTorch version. Loaded
// libraries stay loaded for the life of the process (objects they created may outlive the plugin).
class PluginRegistry {
 public:
  static PluginRegistry& global();

  // Creates a plugin in the default context (see default_context()).
  std::shared_ptr<Plugin> create(const std::string& name_or_path, const PluginOptions& options = {});
  std::shared_ptr<Plugin> create(const std::string& name_or_path, const PluginOptions& options,
                                 const PluginContext& context);
  // A plugin from typed options: colo's (colo::TorchDdpOptions, LowLevelZeroOptions, GeminiOptions,
  // HybridParallelOptions in <colo/plugins/<name>_options.h>, target colo::plugin_options), or any
  // type with a kPluginName (a name or a path) and a to_options(). The same as
  // create(kPluginName, options.to_options()): the plugin parses the map as it parses any other.
  template <typename TypedOptions, typename = decltype(TypedOptions::kPluginName)>
  std::shared_ptr<Plugin> create(const TypedOptions& options) {
    return create(TypedOptions::kPluginName, options.to_options());
  }
  template <typename TypedOptions, typename = decltype(TypedOptions::kPluginName)>
  std::shared_ptr<Plugin> create(const TypedOptions& options, const PluginContext& context) {
    return create(TypedOptions::kPluginName, options.to_options(), context);
  }

  // The plugin's memory plan for `inputs` (a model and a world size), without creating the plugin
  // or any process group: see MemoryPlan. Throws PluginError when the plugin makes none, and the
  // plugin's std::invalid_argument for invalid options.
  MemoryPlan plan_memory(const std::string& name_or_path, const PluginOptions& options,
                         const MemoryPlanInputs& inputs) const;

  // The world group from the launcher's environment (created on first use, once per process)
  // and this rank's device.
  PluginContext default_context();

  // The directories searched for a plugin name, in order (directories that do not exist included).
  std::vector<std::string> search_path() const;
  // Every usable plugin on the search path (the first of each name, as create() would pick it).
  // Files that fail to load or fail the checks are left out; create() on them says why.
  std::vector<PluginListing> available() const;

 private:
  struct LoadedPlugin;

  PluginRegistry() = default;
  // Finds and checks a plugin; the caller holds mutex_.
  const PluginInfo& load_locked(const std::string& name_or_path) const;
  const PluginInfo& open_locked(const std::string& path, const std::string& expected_name) const;
  std::vector<PluginListing> scan_locked(std::vector<std::string>* problems) const;

  mutable std::mutex mutex_;
  std::shared_ptr<PluginContext> default_context_;
  // By canonical path. Never unloaded: objects a plugin created may outlive every handle to it.
  mutable std::map<std::string, std::shared_ptr<LoadedPlugin>> loaded_;
};

}  // namespace colo
