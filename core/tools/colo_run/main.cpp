// colo-run: colo's launcher. See launcher.h for what it does and `colo-run --help` for usage.
#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "launcher.h"

int main(int argc, char** argv) {
  namespace launcher = colo::launcher;
  // The hidden rank mode of --check, recognised before parsing so it never shows in --help.
  if (argc >= 2 && std::strcmp(argv[1], launcher::kCheckRankFlag) == 0) {
    return launcher::check_rank_main(argc >= 3 ? argv[2] : "");
  }
  try {
    launcher::LaunchConfig config =
        launcher::parse_args(std::vector<std::string>(argv + 1, argv + argc));
    if (config.show_help) {
      fmt::print("{}", launcher::usage());
      return 0;
    }
    return launcher::run(std::move(config));
  } catch (const launcher::UsageError& e) {
    fmt::print(stderr, "colo-run: error: {}\nRun 'colo-run --help' for usage.\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "colo-run: error: {}\n", e.what());
    return 1;
  }
}
