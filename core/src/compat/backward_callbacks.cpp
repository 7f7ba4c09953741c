#include <colo/compat/backward_callbacks.h>
#include <torch/csrc/autograd/engine.h>

#include <exception>
#include <utility>
#include <vector>

namespace colo::compat {
namespace {

// Per thread: the autograd engine runs a nested (reentrant) backward pass on the thread that
// started it, so the depth and the held callbacks belong to the thread.
thread_local int nested_depth = 0;
thread_local std::vector<std::function<void()>> held;

}  // namespace

void queue_end_of_backward_callback(std::function<void()> fn) {
  if (nested_depth > 0) {
    held.push_back(std::move(fn));
    return;
  }
  torch::autograd::Engine::get_default_engine().queue_callback(std::move(fn));
}

NestedBackwardScope::NestedBackwardScope() : uncaught_(std::uncaught_exceptions()) { ++nested_depth; }

NestedBackwardScope::~NestedBackwardScope() noexcept(false) {
  if (--nested_depth > 0) return;
  auto callbacks = std::move(held);
  held.clear();
  if (std::uncaught_exceptions() > uncaught_) return;
  // Back in the enclosing pass: the engine's current graph task is the program's own.
  for (auto& fn : callbacks) torch::autograd::Engine::get_default_engine().queue_callback(std::move(fn));
}

}  // namespace colo::compat
