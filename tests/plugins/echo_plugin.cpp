// test_echo: a valid plugin that only parses options, for the registry tests (loading by name
// and by path, COLO_PLUGIN_PATH, option errors crossing the library boundary unchanged).
#include <colo/booster/plugin_info.h>

#include <stdexcept>

namespace {

class EchoPlugin : public colo::Plugin {
 public:
  EchoPlugin(const colo::PluginOptions& options, const colo::PluginContext& context) : Plugin(context) {
    colo::OptionReader reader("test_echo", options);
    const int64_t steps = reader.get_int("steps", 1, "how many steps");
    reader.get_double("scale", 1.0, "a factor");
    reader.get_choice("mode", "fast", {"fast", "slow"}, "a mode");
    if (steps < 1) reader.fail("steps must be at least 1, got " + std::to_string(steps));
    reader.finish();
  }

  std::string name() const override { return "test_echo"; }

  colo::Boosted boost(colo::BoostInputs /*inputs*/) override {
    throw std::logic_error("test_echo exists to test loading and options; it cannot boost a model");
  }
};

}  // namespace

COLO_PLUGIN(test_echo, "9.8.7", EchoPlugin)
