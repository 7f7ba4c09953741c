#include "hybrid_parallel_plugin.h"

#include <colo/booster/plugin_info.h>
#include <colo/engine/data_parallel.h>
#include <colo/engine/parallelize.h>
#include <colo/data/data_loader.h>
#include <colo/dist/process_group.h>
#include <colo/dist/process_group_mesh.h>
#include <colo/nn/layer_stack.h>
#include <colo/pipeline/partition.h>
#include <colo/shardformer/shard_former.h>
#include <colo/shardformer/tp25d_grid.h>
#include <colo/shardformer/tp2d_grid.h>
#include <colo/shardformer/vit_25d_policy.h>
#include <colo/shardformer/vit_3d_policy.h>
#include <colo/shardformer/tp3d_grid.h>
#include <colo/shardformer/vit_2d_policy.h>

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include <colo/engine/pipeline_model.h>

namespace colo::plugins {
namespace {

using dist::MeshAxis;

std::shared_ptr<dist::ProcessGroupMesh> make_mesh(const PluginContext& context, const HybridParallelOptions& o) {
  if (!context.world) {
    throw std::invalid_argument("hybrid_parallel needs the job's world process group in its PluginContext");
  }
  try {
    return std::make_shared<dist::ProcessGroupMesh>(context.world, dist::dp_pp_tp_shape(0, o.pp_size(), o.tp_size()));
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("hybrid_parallel: {}", e.what()));
  }
}

}  // namespace

std::vector<pipeline::LayerRange> HybridParallelPlugin::partition(const std::vector<double>& layer_params,
                                                                  const HybridParallelOptions& o, int num_stages) {
  const int layers = static_cast<int>(layer_params.size());
  auto options = pipeline::stack_partition_options(o.partition(), layers, num_stages);
  if (o.partition() == pipeline::PartitionMethod::kBalanced) options.layer_costs(layer_params);
  if (o.partition() == pipeline::PartitionMethod::kExplicit) options.layers_per_stage(o.layers_per_stage());
  try {
    return pipeline::partition_layers(layers, num_stages, options);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format(
        "hybrid_parallel: the model's {} layers cannot be cut into pp_size {} x num_model_chunks {} = {} stages: {}",
        layers, o.pp_size(), o.num_model_chunks(), num_stages, e.what()));
  }
}

namespace {

// The data-parallel engine's options from the plugin's: `sum_over` the groups whose ranks hold
// disjoint layers (pipeline stages), `tp` the group splitting parameters into pieces.
DataParallelOptions data_parallel_options(const HybridParallelOptions& o,
                                          const std::vector<std::shared_ptr<dist::ProcessGroup>>& sum_over,
                                          const std::shared_ptr<dist::ProcessGroup>& tp) {
  amp::GradNormPlan grad_norm;
  grad_norm.sum_over = sum_over;
  grad_norm.tp = tp;  // split parameters summed over tp, the others once
  return DataParallelOptions()
      .zero_stage(o.zero_stage())
      .caller("hybrid_parallel")
      .replicas(MixedPrecisionOptimizerOptions()
                    .policy(amp::PrecisionPolicy(o.precision()))
                    .loss_scaler(o.loss_scaler())
                    .max_grad_norm(o.max_grad_norm())
                    .grad_norm(grad_norm))
      .all_reduce(ddp::BucketedAllReduceOptions()
                      .bucket_cap_mb(o.bucket_cap_mb())
                      .overlap_communication(o.overlap_communication())
                      .communication_dtype(o.communication_dtype()))
      .zero(ZeroOptimizerOptions()
                .precision(o.precision())
                .loss_scaler(o.loss_scaler())
                .max_grad_norm(o.max_grad_norm())
                .bucket_cap_mb(o.bucket_cap_mb())
                .overlap_communication(o.overlap_communication())
                .cpu_offload(o.cpu_offload())
                .communication_dtype(o.communication_dtype())
                .grad_norm_sum_over(sum_over)
                .tp_group(tp))
      .chunks(GeminiChunkOptions()
                  .precision(o.precision())
                  .chunk_size_mb(o.chunk_size_mb())
                  .offload_optim_frac(o.cpu_offload() ? 1.0 : 0.0)
                  .overlap_communication(o.overlap_communication())
                  .communication_dtype(o.communication_dtype()))
      .gemini(GeminiOptimizerOptions()
                  .loss_scaler(o.loss_scaler())
                  .max_grad_norm(o.max_grad_norm())
                  .grad_norm_sum_over(sum_over)
                  .tp_group(tp));
}

std::vector<double> layer_params(const nn::LayerStack& model) {
  std::vector<double> counts;
  for (const auto& layer : model.layers()) {
    double count = 0;
    for (const auto& p : layer->parameters()) count += static_cast<double>(p.numel());
    counts.push_back(count);
  }
  return counts;
}

}  // namespace

HybridParallelPlugin::HybridParallelPlugin(const PluginOptions& options, const PluginContext& context)
    : Plugin(context), options_(HybridParallelOptions::parse(options)) {
  context_.mesh = make_mesh(context_, options_);
  const auto& mesh = *context_.mesh;
  if (options_.cuda_graphs()) {
    if (auto why = nn::cuda_graphs_unavailable_reason(context_.device)) {
      throw std::invalid_argument(
          fmt::format("hybrid_parallel: cuda_graphs=true cannot run: {}; set cuda_graphs=false", *why));
    }
    // The reduction after the backward graphs is written (reduce_after_graph_backward) but its
    // capture failed on two H200s (2026-11-26: "operation would make the legacy stream depend on a
    // capturing blocking stream" at the first forward, the data-parallel gradient hooks being live
    // during capture), so it stays refused until that runs.
    if (mesh.size(MeshAxis::kDp) > 1) {
      throw std::invalid_argument(fmt::format(
          "hybrid_parallel: cuda_graphs=true with {} data-parallel ranks is not implemented yet (the gradient "
          "all-reduce's hooks cannot be captured); give the layout one data-parallel rank or set cuda_graphs=false",
          mesh.size(MeshAxis::kDp)));
    }
  }
  PerStageCheckpointIO::Part part;
  part.writer = mesh.coordinate(MeshAxis::kDp) == 0 && mesh.coordinate(MeshAxis::kTp) == 0;
  part.index = mesh.coordinate(MeshAxis::kPp);
  part.count = mesh.size(MeshAxis::kPp);
  checkpoint_io_ = std::make_unique<PerStageCheckpointIO>(context_.world, part);
}

void HybridParallelPlugin::shard_tensor_parallel(nn::LayerStack& model, const torch::optim::Optimizer& optimizer,
                                                 const std::shared_ptr<dist::ProcessGroup>& tp) const {
  const auto seed = at::detail::getDefaultCPUGenerator().current_seed();
  if (tp->size() > 1 && !optimizer.state().empty()) {
    throw std::invalid_argument(
        "hybrid_parallel: the optimizer already has state; with tp_size > 1 boost it before its first step (its "
        "state would not fit the sharded parameters)");
  }
  try {
    if (options_.tp_mode() == "2d") {
      // Creating the grid's row and column groups is collective over tp: every rank does it here.
      const shardformer::Vit2dSharder sharder(std::make_shared<shardformer::Tp2dGrid>(tp),
                                              shardformer::Vit2dOptions{options_.sequence_parallel(), seed,
                                                                        context_.device});
      sharder.shard(model);
      return;
    }
    if (options_.tp_mode() == "2.5d") {
      // The layers' and their grids' groups, collective over tp likewise.
      const shardformer::Vit25dSharder sharder(
          std::make_shared<shardformer::Tp25dGrid>(tp, options_.tp_depth()),
          shardformer::Vit25dOptions{options_.sequence_parallel(), seed, context_.device});
      sharder.shard(model);
      return;
    }
    if (options_.tp_mode() == "3d") {
      // The cube's axis and plane groups, collective over tp likewise.
      const shardformer::Vit3dSharder sharder(std::make_shared<shardformer::Tp3dGrid>(tp),
                                              shardformer::Vit3dOptions{options_.sequence_parallel(), seed,
                                                                        context_.device});
      sharder.shard(model);
      return;
    }
    const shardformer::ShardFormer former(tp, shardformer::ShardFormerOptions()
                                                  .sequence_parallel(options_.sequence_parallel())
                                                  .seed(seed)
                                                  .device(context_.device));
    if (tp->size() > 1 || former.problems(model).empty()) former.shard(model);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("hybrid_parallel: {}", e.what()));
  }
}

Boosted HybridParallelPlugin::boost(BoostInputs inputs) {
  if (!inputs.model || !inputs.optimizer || !inputs.criterion) {
    throw std::invalid_argument("hybrid_parallel boost: the model, the optimizer and the criterion are required");
  }
  check_data_parallel_optimizer(*inputs.optimizer, data_parallel_options(options_, {}, nullptr));  // before anything changes
  const auto& mesh = *context_.mesh;
  const auto& dp = mesh.group(MeshAxis::kDp);
  const auto& pp = mesh.group(MeshAxis::kPp);
  const auto& tp = mesh.group(MeshAxis::kTp);

  // 0. Tensor parallelism, on the whole stack before the pipeline cut (a policy may need layers a
  //    stage would not hold). 1d: the policy that knows the model shards its layers for this rank's
  //    tp coordinate; at tp_size 1 a model with a policy goes through the same code (its parallel
  //    layers then communicate nothing); one without is used as it is. 2d: the ViT's blocks on a
  //    q x q grid of the tp ranks (Vit2dSharder). 2.5d: on tp_depth layers of a q x q grid, the
  //    batch split over the layers too (Vit25dSharder). 3d: on a q x q x q cube (Vit3dSharder).
  shard_tensor_parallel(*inputs.model, *inputs.optimizer, tp);
  const pipeline::StageManager stages(options_.pp_size(), mesh.coordinate(MeshAxis::kPp), options_.num_model_chunks());

  // 1. This rank's stages.
  const auto ranges = partition(layer_params(*inputs.model), options_, stages.num_stages());
  std::vector<std::shared_ptr<nn::LayerStack>> chunks;
  auto stack = std::make_shared<nn::LayerStack>();
  for (int c = 0; c < stages.chunks(); ++c) {
    const auto& range = ranges[stages.stage(c)];
    chunks.push_back(inputs.model->slice(range.begin, range.end));
    for (int i = range.begin; i < range.end; ++i) stack->push_back(inputs.model->layer(i));
  }

  // 2.
  broadcast_model(*stack, context_.device, *dp);
  auto fp8_scaling = apply_matmul_precision(*stack, options_.precision(), context_.device, options_.fp8());

  // 3.
  restrict_optimizer(*inputs.optimizer, *stack);
  const amp::PrecisionPolicy policy(options_.precision());
  std::vector<std::shared_ptr<dist::ProcessGroup>> stage_groups;
  if (pp->size() > 1) stage_groups.push_back(pp);
  // The data-parallel step over this rank's stage(s), as the other plugins apply it to the whole
  // model: replicas (0), ZeRO (1, 2) or gemini's chunks (3: each stage chunks its own layers, under
  // tp each rank its pieces; all optimizer state in host memory under cpu_offload). Each stage
  // holds its own layers' gradients (summed over pp for the norm); tp pieces count once.
  const auto data_parallel = apply_data_parallel(stack, inputs.optimizer, dp, data_parallel_options(options_, stage_groups, tp));
  const auto& optimizer = data_parallel->optimizer();
  // Delayed float8 scaling: the ranks of a stage's dp and tp groups hold the same layers (tp: their
  // pieces), so their amaxes are agreed over both, as one process would see them.
  attach_fp8_scaling(*optimizer, std::move(fp8_scaling), {dp, tp});
  PipelineModel::Parts parts;
  parts.data_parallel = data_parallel;

  // 4.
  parts.stack = stack;
  parts.chunks = chunks;
  parts.stages = stages;
  parts.schedule_for = [options = options_](int microbatches) { return options.training_schedule(microbatches); };
  parts.pp_group = pp;
  parts.policy = policy;
  if (options_.tp_mode() == "2d") parts.batch_multiple = shardformer::Tp2dGrid::side_of(tp->size());
  // 3d: the rows are cut q² ways (by j and k on the residual stream, by j and i inside).
  if (options_.tp_mode() == "3d") {
    const int64_t q = shardformer::Tp3dGrid::side_of(tp->size());
    parts.batch_multiple = q * q;
  }
  // 2.5d: the batch's rows are cut over the layers and each layer's grid rows, d·q ways.
  if (options_.tp_mode() == "2.5d") {
    parts.batch_multiple = static_cast<int64_t>(options_.tp_depth()) *
                           shardformer::Tp25dGrid::side_and_depth_of(tp->size(), options_.tp_depth()).q;
  }
  if (options_.cuda_graphs()) {
    // A capture slot per microbatch in flight: execute_pipeline sets each chunk's count from its
    // schedule; a plain forward and backward (one stage, no microbatches) needs one.
    // The data-parallel reduction: after the step's backwards (execute_pipeline), or at the end of
    // a plain synchronised backward.
    for (const auto& chunk : chunks) {
      parts.graphed.push_back(std::make_shared<nn::CudaGraphedStack>(chunk));
      reduce_after_graph_backward(*parts.graphed.back(), data_parallel->reducer());
    }
  }
  auto model = std::make_shared<PipelineModel>(std::move(parts));

  // 5.
  if (inputs.dataloader) shard_dataloader(*inputs.dataloader, *dp, name());

  PerStageCheckpointIO::Part part;
  part.writer = mesh.coordinate(MeshAxis::kDp) == 0 && mesh.coordinate(MeshAxis::kTp) == 0;
  part.index = stages.pp_rank();
  part.count = stages.pp_size();
  for (const auto& item : stack->canonical_named_parameters()) part.names.insert(item.key());
  for (const auto& item : stack->canonical_named_buffers()) part.names.insert(item.key());
  part.tp = tp;
  part.cuts = stack->canonical_shard_cuts();
  part.writer_tp_peer = mesh.coordinate(MeshAxis::kDp) == 0;
  checkpoint_io_->set_part(std::move(part));
  return {model, optimizer, inputs.criterion, inputs.dataloader, inputs.lr_scheduler, context_.mesh};
}

// A forward-only pass keeps no activations for a backward: a stage holds one layer's activations
// of the microbatch it runs, less than a training step holds at any microbatch size, and the
// non-pipelined plugins forward a whole evaluation batch at once, so the loader's batch size is
// already the memory bound the user chose. The training microbatch size (often 1 to fit the
// backward) would pay the per-microbatch cost (kernel launches, a send and receive per stage)
// once per sample. By default the batch goes in 2 x pp microbatches: enough to keep every stage
// busy once the first reaches the last (idle share (pp-1)/(3pp-1), under a third), few enough that
// each is large. Interleaving takes microbatches in groups of pp: the count is kept a multiple.
int HybridParallelPlugin::eval_microbatches(const HybridParallelOptions& options, int64_t batch) {
  const int64_t pp = options.pp_size();
  int64_t count = options.eval_microbatch_size() > 0
                      ? (batch + options.eval_microbatch_size() - 1) / options.eval_microbatch_size()
                      : (pp > 1 ? 2 * pp : 1);
  count = std::min(count, batch);
  if (options.num_model_chunks() > 1 && count % pp != 0) {
    const int64_t up = (count + pp - 1) / pp * pp;
    if (up <= batch) {
      count = up;
    } else if (batch >= pp) {
      count = batch / pp * pp;
    }  // else fewer samples than stages: the schedule's own error says so
  }
  return static_cast<int>(count);
}

int HybridParallelPlugin::microbatches_for(const HybridParallelOptions& options, int64_t batch, bool forward_only) {
  if (batch < 1) throw std::invalid_argument("hybrid_parallel execute_pipeline: the batch is empty");
  if (forward_only) return eval_microbatches(options, batch);
  if (options.num_microbatches() > 0) {
    const int64_t m = options.num_microbatches();
    if (!forward_only && batch % m != 0) {
      throw std::invalid_argument(fmt::format(
          "hybrid_parallel: a batch of {} does not split into num_microbatches={} equal microbatches; "
          "use a batch size that is a multiple of {} (per data-parallel rank)",
          batch, m, m));
    }
    return static_cast<int>(std::min(m, batch));
  }
  const int64_t size = options.microbatch_size();
  if (!forward_only && batch % size != 0) {
    throw std::invalid_argument(fmt::format(
        "hybrid_parallel: a batch of {} does not split into microbatches of microbatch_size={}; use a "
        "batch size that is a multiple of {} (per data-parallel rank)",
        batch, size, size));
  }
  return static_cast<int>((batch + size - 1) / size);
}

PipelineResult HybridParallelPlugin::execute_pipeline(const torch::Tensor& inputs, const torch::Tensor& targets,
                                                      ModelWrapper& model, const Criterion& criterion,
                                                      OptimizerWrapper& optimizer, const PipelineOptions& options) {
  auto* pipelined = dynamic_cast<PipelineModel*>(&model);
  if (!pipelined) {
    throw std::invalid_argument(
        "hybrid_parallel execute_pipeline: the model was not boosted by hybrid_parallel; pass the boosted model");
  }
  if (!supports_pipeline()) {
    throw std::logic_error(
        "hybrid_parallel execute_pipeline: this plugin runs no pipeline (pp_size=1 without num_microbatches or "
        "microbatch_size); run model->forward and booster.backward, or set num_microbatches");
  }
  const bool forward_only = options.forward_only();
  if (!forward_only && !targets.defined()) {
    throw std::invalid_argument("hybrid_parallel execute_pipeline: a training step needs the targets");
  }
  if (targets.defined() && targets.size(0) != inputs.size(0)) {
    throw std::invalid_argument(fmt::format("hybrid_parallel execute_pipeline: {} inputs but {} targets",
                                            inputs.size(0), targets.size(0)));
  }
  const int64_t batch = inputs.size(0);
  const int m = microbatches_for(options_, batch, forward_only);
  // Training microbatches are equal (the batch divides); forward-only ones differ by one at most.
  const auto compute_inputs = pipelined->policy().cast_to_compute(inputs);
  auto micro_inputs = compute_inputs.tensor_split(static_cast<int64_t>(m));
  // 2d (2.5d, 3d): each microbatch padded to a multiple of q (d·q, q²) rows; its loss and outputs see its
  // own rows only.
  std::vector<int64_t> micro_rows;
  for (auto& micro : micro_inputs) {
    micro_rows.push_back(micro.size(0));
    micro = pipelined->pad_batch(micro);
  }
  const auto micro_targets = targets.defined() ? targets.tensor_split(static_cast<int64_t>(m)) : std::vector<torch::Tensor>{};
  const int count = static_cast<int>(micro_inputs.size());

  pipeline::ScheduleRunner* runner = nullptr;
  try {
    // A schedule file trains num_microbatches only; a forward-only pass runs a schedule the
    // runner makes for its own count, on any runner.
    const bool fixed = options_.schedule_from_file().has_value();
    runner = &pipelined->runner(forward_only && fixed ? static_cast<int>(options_.num_microbatches()) : count);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("hybrid_parallel execute_pipeline: a batch of {} gives {} microbatches: {}",
                                            batch, count, e.what()));
  }
  const bool layer_by_layer = pipelined->gathers_layer_by_layer(count);
  if (!layer_by_layer) pipelined->wait_for_weights();
  if (!forward_only) pipelined->prepare_for_backward();

  pipeline::StageCallbacks callbacks;
  // Each microbatch's mean loss, weighted by its share of the batch: their sum is the batch mean.
  callbacks.loss = [&criterion, batch](const torch::Tensor& output, const torch::Tensor& target) {
    const auto own = output.size(0) > target.size(0) ? output.narrow(0, 0, target.size(0)) : output;
    return criterion(own, target) * (static_cast<double>(own.size(0)) / static_cast<double>(batch));
  };
  callbacks.backward_loss = [&optimizer](const torch::Tensor& loss) { optimizer.backward(loss); };
  callbacks.backward_output = [&optimizer](const torch::Tensor& output, const torch::Tensor& grad) {
    optimizer.backward_by_grad({output}, {grad});
  };
  if (const auto& graphed = pipelined->graphed(); !graphed.empty()) {
    if (!forward_only) {
      // Each chunk holds as many microbatches at once as its stage does under this schedule.
      for (int c = 0; c < static_cast<int>(graphed.size()); ++c) {
        const int held = pipeline::peak_in_flight(runner->schedule(), pipelined->stages().stage(c));
        graphed[static_cast<std::size_t>(c)]->set_max_in_flight(std::max(1, held));
      }
    }
    callbacks.forward = [graphed](int chunk, const torch::Tensor& x) {
      return graphed.at(static_cast<std::size_t>(chunk))->forward(x);
    };
  }

  if (layer_by_layer) {
    callbacks.forward = [pipelined](int, const torch::Tensor& x) { return pipelined->forward_layer_by_layer(x); };
  }

  // Every backward of the step accumulates locally; the data-parallel reduction runs once, after
  // the rank's last backward, unless the caller accumulates over several steps (no_sync): the
  // engine's one gradient-sync handle, whichever side of it reduces.
  auto& sync = pipelined->data_parallel();
  const bool synchronised = sync.gradient_sync();
  pipeline::RunResult run;
  {
    NoSyncGuard restore([&] { sync.set_gradient_sync(synchronised); });
    if (!forward_only) sync.set_gradient_sync(false);
    run = runner->run(micro_inputs, micro_targets, callbacks,
                      pipeline::RunOptions().forward_only(forward_only).keep_outputs(options.return_outputs()));
  }
  if (!forward_only && synchronised) sync.reduce_accumulated_gradients();
  pipelined->release_weights();

  PipelineResult result;
  const auto& stages = pipelined->stages();
  if (options.return_loss() && targets.defined()) {
    auto loss = run.loss.defined() ? run.loss.to(torch::kFloat).reshape({})
                                   : torch::zeros({}, inputs.options().dtype(torch::kFloat));
    const auto& pp = pipelined->pp_group();
    if (pp->size() > 1) {
      auto travelling = pp->communicable(loss.contiguous());
      pp->broadcast(travelling, stages.rank_of(stages.num_stages() - 1)).wait();
      loss = travelling.to(inputs.device());
    }
    result.loss = loss;
  }
  if (options.return_outputs() && stages.is_last_stage()) {
    for (std::size_t i = 0; i < run.outputs.size() && i < micro_rows.size(); ++i) {
      if (run.outputs[i].size(0) > micro_rows[i]) run.outputs[i] = run.outputs[i].narrow(0, 0, micro_rows[i]);
    }
    result.outputs = torch::cat(run.outputs);
  }
  return result;
}

}  // namespace colo::plugins

COLO_PLUGIN(hybrid_parallel, "0.1.0", colo::plugins::HybridParallelPlugin)
