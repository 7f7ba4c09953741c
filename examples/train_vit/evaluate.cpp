#include "evaluate.h"

#include <colo/data/data_loader.h>
#include <colo/dist/process_group.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>

namespace train_vit {

EvalResult evaluate(colo::Booster& booster, const colo::Boosted& boosted, colo::data::DataLoader& loader,
                    const std::shared_ptr<colo::dist::ProcessGroup>& world) {
  const auto start = std::chrono::steady_clock::now();
  auto& model = *boosted.model;
  const bool pipelined = booster.plugin().supports_pipeline();
  const bool was_training = model.is_training();
  model.eval();
  torch::NoGradGuard no_grad;

  const auto& sampler = loader.sampler();
  const int64_t replicas = sampler.num_replicas();
  const int64_t rank = sampler.rank();
  const int64_t dataset_size = sampler.dataset_size();
  const int64_t batch_size = loader.options().batch_size();

  // [correct, counted, loss sum] in fp64: exact counts, and one all-reduce for all three.
  double correct = 0, counted = 0, loss_sum = 0;
  loader.reset();
  int64_t batch_index = 0;
  while (auto batch = loader.next()) {
    const int64_t n = batch->size();
    // Without shuffling, shard element i is sample rank + i * replicas; positions past the
    // data set's end are the wrap-around padding.
    const int64_t first = rank + batch_index * batch_size * replicas;
    const int64_t valid = std::clamp<int64_t>((dataset_size - first + replicas - 1) / replicas, 0, n);
    ++batch_index;
    if (valid == 0) continue;
    torch::Tensor outputs;
    if (pipelined) {
      outputs = booster
                    .execute_pipeline(batch->images, torch::Tensor(), model, boosted.criterion, *boosted.optimizer,
                                      colo::PipelineOptions().forward_only(true).return_outputs(true).return_loss(false))
                    .outputs;
      if (!outputs.defined()) continue;  // not the last stage
    } else {
      outputs = model.forward(batch->images);
    }
    auto logits = outputs.narrow(0, 0, valid).to(torch::kFloat);
    auto labels = batch->labels.narrow(0, 0, valid);
    correct += static_cast<double>(logits.argmax(1).eq(labels).sum().item<int64_t>());
    loss_sum += torch::nn::functional::cross_entropy(
                    logits, labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                    .item<double>();
    counted += static_cast<double>(valid);
  }
  loader.reset();
  model.train(was_training);

  // On the batches' device: NCCL reduces only GPU tensors.
  auto totals = torch::tensor({correct, counted, loss_sum}, torch::kFloat64).to(loader.options().device());
  if (world && world->size() > 1) world->all_reduce(totals).wait();
  totals = totals.cpu();
  const auto sums = totals.accessor<double, 1>();
  EvalResult result;
  result.top1 = sums[1] > 0 ? sums[0] / sums[1] : 0.0;
  result.loss = sums[1] > 0 ? sums[2] / sums[1] : 0.0;
  result.images = dataset_size;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace train_vit
