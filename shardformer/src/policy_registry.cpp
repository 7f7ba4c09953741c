#include <colo/shardformer/policy_registry.h>
#include <fmt/format.h>

#include <stdexcept>

namespace colo::shardformer {

PolicyRegistry& PolicyRegistry::global() {
  static PolicyRegistry registry;
  return registry;
}

void PolicyRegistry::add(std::shared_ptr<Policy> policy) {
  if (!policy) throw std::invalid_argument("PolicyRegistry::add: the policy is null");
  const std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& known : policies_) {
    if (known->name() == policy->name()) {
      throw std::invalid_argument(fmt::format("PolicyRegistry::add: a policy named '{}' is already registered", policy->name()));
    }
  }
  policies_.insert(policies_.begin(), std::move(policy));
}

std::vector<std::shared_ptr<Policy>> PolicyRegistry::policies() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return policies_;
}

}  // namespace colo::shardformer
