#pragma once

#include <colo/booster/plugin.h>
#include <colo/booster/plugin_options.h>

#include <torch/version.h>

#include <boost/dll/alias.hpp>

#include <memory>

namespace colo {

// Bumped whenever Plugin, the wrappers or PluginInfo change in a way that breaks plugins
// compiled against older headers.
inline constexpr int kPluginApiVersion = 2;

// The one entry a plugin exports (as the symbol `colo_plugin_info`, through Boost.DLL).
// api_version comes first and is a plain int so that the loader can read it safely from a
// plugin built against any version of this header, before touching anything else.
struct PluginInfo {
  int api_version;
  const char* torch_version;  // TORCH_VERSION the plugin was compiled against
  const char* name;
  const char* version;
  std::unique_ptr<Plugin> (*create)(const PluginOptions& options, const PluginContext& context);
};

}  // namespace colo

// Declares a plugin: COLO_PLUGIN(torch_ddp, "0.1.0", colo::plugins::TorchDdpPlugin) in one .cpp of
// the plugin. The class needs a constructor (const PluginOptions&, const PluginContext&).
#define COLO_PLUGIN(plugin_name, plugin_version, PluginClass)                                       \
  namespace colo_plugin_entry {                                                                     \
  static std::unique_ptr<::colo::Plugin> create(const ::colo::PluginOptions& options,               \
                                                const ::colo::PluginContext& context) {             \
    return std::make_unique<PluginClass>(options, context);                                        \
  }                                                                                                 \
  const ::colo::PluginInfo* info() {                                                                \
    static const ::colo::PluginInfo value{::colo::kPluginApiVersion, TORCH_VERSION, #plugin_name,   \
                                          plugin_version, &create};                                 \
    return &value;                                                                                  \
  }                                                                                                 \
  }                                                                                                 \
  BOOST_DLL_ALIAS(colo_plugin_entry::info, colo_plugin_info)
