#pragma once

#include <colo/booster/memory_plan.h>
#include <colo/booster/plugin.h>
#include <colo/booster/plugin_options.h>

#include <torch/version.h>

#include <boost/dll/alias.hpp>

#include <memory>
#include <type_traits>
#include <utility>

namespace colo {

// Bumped whenever Plugin, the wrappers or PluginInfo change in a way that breaks plugins
// compiled against older headers.
// 4: RankMemory::chunks (a MemoryPlan returned by plan_memory changed its layout).
inline constexpr int kPluginApiVersion = 4;

// The one entry a plugin exports (as the symbol `colo_plugin_info`, through Boost.DLL).
// api_version comes first and is a plain int so that the loader can read it safely from a
// plugin built against any version of this header, before touching anything else.
struct PluginInfo {
  int api_version;
  const char* torch_version;  // TORCH_VERSION the plugin was compiled against
  const char* name;
  const char* version;
  std::unique_ptr<Plugin> (*create)(const PluginOptions& options, const PluginContext& context);
  // The plugin's memory plan for a model and a world it is not running on (Booster::plan_memory);
  // null when the plugin makes none. Throws std::invalid_argument for invalid options.
  MemoryPlan (*plan_memory)(const PluginOptions& options, const MemoryPlanInputs& inputs);
};

namespace detail {
// A plugin class plans memory when it has
//   static MemoryPlan plan_memory(const PluginOptions&, const MemoryPlanInputs&);
template <typename T, typename = void>
struct PlansMemory : std::false_type {};
template <typename T>
struct PlansMemory<T, std::void_t<decltype(T::plan_memory(std::declval<const PluginOptions&>(),
                                                          std::declval<const MemoryPlanInputs&>()))>>
    : std::true_type {};

template <typename T>
constexpr MemoryPlan (*plan_memory_of())(const PluginOptions&, const MemoryPlanInputs&) {
  if constexpr (PlansMemory<T>::value) {
    return &T::plan_memory;
  } else {
    return nullptr;
  }
}
}  // namespace detail

}  // namespace colo

// Declares a plugin: COLO_PLUGIN(torch_ddp, "0.1.0", colo::plugins::TorchDdpPlugin) in one .cpp of
// the plugin. The class needs a constructor (const PluginOptions&, const PluginContext&), and may
// have a static plan_memory (see PluginInfo).
#define COLO_PLUGIN(plugin_name, plugin_version, PluginClass)                                       \
  namespace colo_plugin_entry {                                                                     \
  static std::unique_ptr<::colo::Plugin> create(const ::colo::PluginOptions& options,               \
                                                const ::colo::PluginContext& context) {             \
    return std::make_unique<PluginClass>(options, context);                                        \
  }                                                                                                 \
  const ::colo::PluginInfo* info() {                                                                \
    static const ::colo::PluginInfo value{::colo::kPluginApiVersion, TORCH_VERSION, #plugin_name,   \
                                          plugin_version, &create,                                  \
                                          ::colo::detail::plan_memory_of<PluginClass>()};           \
    return &value;                                                                                  \
  }                                                                                                 \
  }                                                                                                 \
  BOOST_DLL_ALIAS(colo_plugin_entry::info, colo_plugin_info)
