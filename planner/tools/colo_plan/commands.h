#pragma once
// colo-plan's two commands: plan (the default) and profile.

#include <stdexcept>
#include <string>
#include <vector>

namespace colo_plan {

// A command line that cannot be run: main() prints it and exits with status 2.
class UsageError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

int run_plan(const std::vector<std::string>& args);
int run_profile(const std::vector<std::string>& args);

// The cluster file colo-plan uses without --cluster: the shipped 8×H100 SXM file
// (colo::planner::shipped_cluster_file).
std::string default_cluster_file();

}  // namespace colo_plan
