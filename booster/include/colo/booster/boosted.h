#pragma once

#include <colo/engine/model_wrapper.h>
#include <colo/engine/optimizer_wrapper.h>

#include <torch/torch.h>

#include <functional>
#include <memory>

namespace colo::data {
class DataLoader;
}
namespace colo::dist {
class ProcessGroupMesh;
}
namespace colo::optim {
class LRScheduler;
}

namespace colo {

// loss = criterion(output, target)
using Criterion = std::function<torch::Tensor(const torch::Tensor& output, const torch::Tensor& target)>;

// What Booster::boost takes: the user's objects. The optimizer must have been built over
// model->parameters(). The data loader and scheduler are optional.
struct BoostInputs {
  std::shared_ptr<nn::LayerStack> model;
  std::shared_ptr<torch::optim::Optimizer> optimizer;
  Criterion criterion;
  std::shared_ptr<data::DataLoader> dataloader;
  std::shared_ptr<optim::LRScheduler> lr_scheduler;
};

// What it returns: the same objects, boosted.
struct Boosted {
  std::shared_ptr<ModelWrapper> model;
  std::shared_ptr<OptimizerWrapper> optimizer;
  Criterion criterion;
  std::shared_ptr<data::DataLoader> dataloader;  // re-sharded over the data-parallel axis
  std::shared_ptr<optim::LRScheduler> lr_scheduler;
  // The plugin's layout: the (dp, pp, tp) mesh and its groups. User code reads the data-parallel
  // size and rank from it (mesh->size(MeshAxis::kDp), mesh->coordinate(MeshAxis::kDp)) to shard
  // evaluation data. Never null after Booster::boost, which refuses a plugin that sets neither
  // this nor PluginContext::mesh (one training on a single device sets a one-rank mesh).
  std::shared_ptr<const dist::ProcessGroupMesh> mesh;
};

}  // namespace colo
