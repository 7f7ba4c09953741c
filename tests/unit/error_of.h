#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>

namespace colo::testing {

// The message of the E that `body` throws; fails the test when it throws nothing (anything other
// than an E propagates and fails the test too).
template <typename E, typename Body>
std::string error_of(Body&& body) {
  try {
    std::forward<Body>(body)();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

}  // namespace colo::testing
