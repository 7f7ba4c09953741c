// colo-run: colo's launcher. See launcher.h for what it does and `colo-run --help` for usage.
#include <fmt/format.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "job_token.h"
#include "launcher.h"
#include "output.h"

int main(int argc, char** argv) {
  namespace launcher = colo::launcher;
  // colo-run's own writes must survive a closed pipe (they report EPIPE instead, see output.h);
  // the ranks get the default disposition back before exec.
  std::signal(SIGPIPE, SIG_IGN);
  // The hidden rank mode of --check, recognised before parsing so it never shows in --help.
  if (argc >= 2 && std::strcmp(argv[1], launcher::kCheckRankFlag) == 0) {
    return launcher::check_rank_main(argc >= 3 ? argv[2] : "");
  }
  try {
    launcher::LaunchConfig config =
        launcher::parse_args(std::vector<std::string>(argv + 1, argv + argc));
    if (config.show_help) {
      launcher::print_to(STDOUT_FILENO, "{}", launcher::usage());
      return 0;
    }
    if (config.new_token) {
      launcher::print_to(STDOUT_FILENO, "{}\n", launcher::new_job_token());
      return 0;
    }
    return launcher::run(std::move(config));
  } catch (const launcher::UsageError& e) {
    launcher::print_to(STDERR_FILENO, "colo-run: error: {}\nRun 'colo-run --help' for usage.\n",
                       e.what());
    return 2;
  } catch (const std::exception& e) {
    launcher::print_to(STDERR_FILENO, "colo-run: error: {}\n", e.what());
    return 1;
  }
}
