#pragma once

#include "launcher.h"

// colo-run --check: instead of a program, colo-run starts N copies of itself in the hidden rank
// mode (kCheckRankFlag), each of which verifies what colo-run promised it (check_rank_main in
// launcher.h), and reports whether every rank did.
namespace colo::launcher {

int run_self_check(LaunchConfig config);

}  // namespace colo::launcher
