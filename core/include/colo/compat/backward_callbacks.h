#pragma once

#include <functional>

namespace colo::compat {

// Queues `fn` to run once the backward pass being executed has finished (after every gradient
// has been accumulated). Only valid from inside that pass (e.g. from an autograd hook).
//
// Inside a NestedBackwardScope (activation checkpointing recomputes a layer and runs a backward
// pass of its own inside the outer one), the pass being executed is the nested one, which ends
// as soon as that layer's gradients are in: `fn` is held instead and queued on the enclosing pass
// when the outermost scope closes, so that "end of backward" still means the end of the pass the
// program started.
void queue_end_of_backward_callback(std::function<void()> fn);

// Marks the current thread as running a nested backward pass for its lifetime (see above).
// Scopes nest; callbacks held are queued when the outermost one closes normally and dropped when
// it closes by an exception (the outer pass fails with it).
class NestedBackwardScope {
 public:
  NestedBackwardScope();
  ~NestedBackwardScope() noexcept(false);
  NestedBackwardScope(const NestedBackwardScope&) = delete;
  NestedBackwardScope& operator=(const NestedBackwardScope&) = delete;

 private:
  int uncaught_;
};

}  // namespace colo::compat
