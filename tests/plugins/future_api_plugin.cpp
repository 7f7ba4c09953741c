// test_future_api: declares a plugin API version this colo does not have. The registry must
// refuse it after reading api_version alone, so its factory must never run.
#include <colo/booster/plugin_info.h>

#include <cstdio>
#include <cstdlib>

namespace {

std::unique_ptr<colo::Plugin> never_called(const colo::PluginOptions&, const colo::PluginContext&) {
  std::fputs("test_future_api: the registry called the factory of a plugin with a wrong API version\n", stderr);
  std::abort();
}

const colo::PluginInfo* info() {
  static const colo::PluginInfo value{colo::kPluginApiVersion + 1000, TORCH_VERSION, "test_future_api", "1.0",
                                      &never_called, nullptr};
  return &value;
}

}  // namespace

BOOST_DLL_ALIAS(info, colo_plugin_info)
