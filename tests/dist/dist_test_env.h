#pragma once

#include <colo/dist/process_group.h>

#include <memory>

namespace colo::test {

// The world group of this distributed test run (created once in main.cpp, after colo-run has
// started every rank). Tests build meshes and subgroups from it.
std::shared_ptr<dist::ProcessGroup> world();

}  // namespace colo::test
