// test_wrong_torch: claims to be built against a LibTorch that does not exist. The registry
// must refuse it before calling its factory.
#include <colo/booster/plugin_info.h>

#include <cstdio>
#include <cstdlib>

namespace {

std::unique_ptr<colo::Plugin> never_called(const colo::PluginOptions&, const colo::PluginContext&) {
  std::fputs("test_wrong_torch: the registry called the factory of a plugin built for another LibTorch\n", stderr);
  std::abort();
}

const colo::PluginInfo* info() {
  static const colo::PluginInfo value{colo::kPluginApiVersion, "0.0.0-fake", "test_wrong_torch", "1.0", &never_called, nullptr};
  return &value;
}

}  // namespace

BOOST_DLL_ALIAS(info, colo_plugin_info)
