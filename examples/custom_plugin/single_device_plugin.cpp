// single_device: a complete colo plugin built outside the colo tree, as a third party would
// write one. It trains on one device with no distribution and no mixed precision: forward runs
// the user's layer stack, backward is loss.backward(), a step is the user's optimizer's step,
// optionally after clipping gradients by their global norm.
//
// Options:
//   max_grad_norm (default 0)  clip gradients to this global L2 norm before each step; 0: off
#include <colo/amp/grad_clip.h>
#include <colo/booster/plugin_info.h>
#include <colo/dist/process_group.h>
#include <colo/dist/process_group_mesh.h>
#include <colo/optim/optimizer_state.h>

#include <fmt/format.h>

#include <map>
#include <stdexcept>
#include <unordered_map>

namespace single_device {

class Model : public colo::ModelWrapper {
 public:
  Model(std::shared_ptr<colo::nn::LayerStack> module, c10::Device device)
      : ModelWrapper(std::move(module)), device_(device) {}

  torch::Tensor forward(const torch::Tensor& input) override { return module_->forward(input.to(device_)); }

 private:
  c10::Device device_;
};

class Optimizer : public colo::OptimizerWrapper {
 public:
  Optimizer(std::shared_ptr<torch::optim::Optimizer> optimizer, const colo::nn::LayerStack& model, double max_grad_norm)
      : optimizer_(std::move(optimizer)), params_(colo::optim::optimizer_params(*optimizer_)) {
    set_max_grad_norm(max_grad_norm);
    // Checkpoints key optimizer state by the model's canonical parameter names.
    std::unordered_map<const void*, std::string> names;
    for (const auto& item : model.canonical_named_parameters()) {
      names.emplace(item.value().unsafeGetTensorImpl(), item.key());
    }
    for (const auto& p : params_) {
      auto it = names.find(p.unsafeGetTensorImpl());
      if (it == names.end()) {
        throw std::invalid_argument(
            "single_device: the optimizer updates a tensor that is not a parameter of the model; build the "
            "optimizer over model->parameters()");
      }
      param_names_.push_back(it->second);
    }
  }

  void backward(const torch::Tensor& loss) override { loss.backward(); }

  bool step() override {
    std::vector<torch::Tensor> grads;
    for (const auto& p : params_) grads.push_back(p.grad());
    const auto clip = colo::amp::unscale_and_clip(grads, /*inv_scale=*/1.0, max_grad_norm_);
    last_grad_norm_ = clip.total_norm;
    // An inf or nan gradient would turn every weight it touches into nan: skip the step instead.
    if (clip.found_inf) {
      ++skipped_steps_;
      return false;
    }
    optimizer_->step();
    return true;
  }

  void zero_grad() override {
    for (auto& p : params_) {
      if (p.grad().defined()) p.mutable_grad().zero_();
    }
  }

  int64_t skipped_steps() const override { return skipped_steps_; }
  torch::optim::Optimizer& optimizer() override { return *optimizer_; }

  FullState full_state() const override {
    FullState state;
    for (size_t i = 0; i < params_.size(); ++i) {
      for (const auto& [key, tensor] : colo::optim::get_param_state(*optimizer_, i)) {
        state.tensors.emplace_back(param_names_[i] + "." + key, tensor.detach());
      }
    }
    state.scalars["skipped_steps"] = static_cast<double>(skipped_steps_);
    return state;
  }

  void load_full_state(const FullState& state) override {
    std::map<std::string, std::map<std::string, torch::Tensor>> by_param;
    for (const auto& [name, tensor] : state.tensors) {
      const auto dot = name.rfind('.');
      if (dot == std::string::npos) {
        throw std::invalid_argument(
            fmt::format("single_device: optimizer state entry '{}' has no '<param>.' prefix", name));
      }
      by_param[name.substr(0, dot)][name.substr(dot + 1)] = tensor;
    }
    for (size_t i = 0; i < params_.size(); ++i) {
      auto it = by_param.find(param_names_[i]);
      if (it == by_param.end()) continue;  // never updated when saved: no state
      colo::optim::set_param_state(*optimizer_, i, it->second);
      by_param.erase(it);
    }
    if (!by_param.empty()) {
      throw std::invalid_argument(fmt::format(
          "single_device: the optimizer state has entries for '{}', which is not a parameter of this model; was it "
          "saved from a model of the same configuration?",
          by_param.begin()->first));
    }
    auto skipped = state.scalars.find("skipped_steps");
    skipped_steps_ = skipped == state.scalars.end() ? 0 : static_cast<int64_t>(skipped->second);
  }

 private:
  std::shared_ptr<torch::optim::Optimizer> optimizer_;
  std::vector<torch::Tensor> params_;
  std::vector<std::string> param_names_;
  int64_t skipped_steps_ = 0;
};

// docs/writing_a_plugin.md begin
class SingleDevicePlugin : public colo::Plugin {
 public:
  // Every option is read and every rule checked before anything else happens, so that one
  // error lists every problem.
  SingleDevicePlugin(const colo::PluginOptions& options, const colo::PluginContext& context) : Plugin(context) {
    colo::OptionReader reader("single_device", options);
    max_grad_norm_ = reader.get_double("max_grad_norm", 0.0, "clip gradients to this global L2 norm; 0: off");
    if (max_grad_norm_ < 0) {
      reader.fail(fmt::format("max_grad_norm must be >= 0 (0 disables clipping), got {}", max_grad_norm_));
    }
    const int world_size = context.world ? context.world->size() : 1;
    if (world_size != 1) {
      reader.fail(
          fmt::format("single_device trains in one process, but this job has {} ranks; start it without "
                      "a launcher, or use a distributed plugin such as torch_ddp",
                      world_size));
    }
    reader.finish();
    // The plugin's layout, which Booster::boost requires (Boosted::mesh): one rank, every axis of
    // size 1. The Trainer and user code read the data-parallel size and rank from it.
    if (context.world) {
      context_.mesh = std::make_shared<colo::dist::ProcessGroupMesh>(context.world, colo::dist::dp_pp_tp_shape(1, 1, 1));
    }
  }

  std::string name() const override { return "single_device"; }

  colo::Boosted boost(colo::BoostInputs inputs) override {
    if (!inputs.model || !inputs.optimizer || !inputs.criterion) {
      throw std::invalid_argument("single_device: boost needs a model, an optimizer and a criterion");
    }
    const c10::Device device = context_.device;
    // Module::to moves parameters in place, so the optimizer built over them stays valid.
    inputs.model->to(device);
    colo::Boosted out;
    out.model = std::make_shared<Model>(inputs.model, device);
    out.optimizer = std::make_shared<Optimizer>(inputs.optimizer, *inputs.model, max_grad_norm_);
    out.criterion = [criterion = std::move(inputs.criterion), device](const torch::Tensor& output,
                                                                      const torch::Tensor& target) {
      return criterion(output, target.to(device));
    };
    out.dataloader = std::move(inputs.dataloader);
    out.lr_scheduler = std::move(inputs.lr_scheduler);
    out.mesh = context_.mesh;
    return out;
  }

 private:
  double max_grad_norm_ = 0.0;
};
// docs/writing_a_plugin.md end

}  // namespace single_device

// docs/writing_a_plugin.md begin
COLO_PLUGIN(single_device, "1.0.0", single_device::SingleDevicePlugin)
// docs/writing_a_plugin.md end
