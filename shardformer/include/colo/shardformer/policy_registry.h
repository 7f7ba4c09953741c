#pragma once

#include <colo/shardformer/policy.h>

#include <memory>
#include <mutex>
#include <vector>

namespace colo::shardformer {

// The policies a program adds for its own models, consulted by every ShardFormer (before the
// built-in ViT policy). It is what lets a model of the user's reach tensor parallelism through the
// hybrid_parallel plugin, which builds its ShardFormer itself inside boost(): add the policy once,
// before boosting (docs/adding_a_model_policy.md). Process-wide like PluginRegistry::global(),
// and for the same reason: the plugin is loaded at run time and cannot be handed objects.
class PolicyRegistry {
 public:
  static PolicyRegistry& global();

  // Adds `policy`; a later one is tried before an earlier one. Throws std::invalid_argument for
  // a null policy or one whose name is already registered.
  void add(std::shared_ptr<Policy> policy);
  // The registered policies, latest first.
  std::vector<std::shared_ptr<Policy>> policies() const;

 private:
  mutable std::mutex mutex_;
  std::vector<std::shared_ptr<Policy>> policies_;
};

}  // namespace colo::shardformer
