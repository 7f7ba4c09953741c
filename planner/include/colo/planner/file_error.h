#pragma once

#include <stdexcept>

namespace colo::planner {

// A cluster or profile file that cannot be used: unreadable, malformed JSON, or a field missing,
// of the wrong type or out of range. The message names the file, the line and the field, and
// says what the field must hold.
class PlannerFileError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

}  // namespace colo::planner
