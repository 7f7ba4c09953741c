#include "backend_lifecycle.h"
#include "collective_progress.h"
#include "peer_addresses.h"
#include "host_staging.h"
#include "process_group_impl.h"
#include "rendezvous.h"
#include "signed_store.h"
#include "wait_failure.h"

#include <colo/compat/torch_compat.h>
#include <colo/dist/backend_choice.h>
#include <colo/dist/environment.h>
#include <colo/dist/errors.h>
#include <colo/dist/process_group.h>
#include <colo/env/fault_injection.h>
#include <colo/env/variables.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/cuda.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <map>
#include <mutex>
#include <thread>

namespace colo::dist {

namespace {

c10d::ReduceOp to_c10d(ReduceOp op, Backend backend) {
  switch (op) {
    case ReduceOp::kSum:
      return c10d::ReduceOp::SUM;
    case ReduceOp::kAvg:  // Gloo has no AVG: SUM, then a division on completion
      return backend == Backend::kNccl ? c10d::ReduceOp::AVG : c10d::ReduceOp::SUM;
    case ReduceOp::kMax:
      return c10d::ReduceOp::MAX;
    case ReduceOp::kMin:
      return c10d::ReduceOp::MIN;
    case ReduceOp::kProduct:
      return c10d::ReduceOp::PRODUCT;
  }
  throw std::invalid_argument("unknown ReduceOp");
}

const char* backend_name(Backend b) { return b == Backend::kNccl ? "nccl" : "gloo"; }

void require_same_device_kind(const torch::Tensor& t, Backend backend, const char* op) {
  if (backend == Backend::kNccl && !t.is_cuda()) {
    throw std::invalid_argument(fmt::format("{} over NCCL needs CUDA tensors, got a {} tensor", op, t.device().str()));
  }
}

}  // namespace

// ---- Work handles (waiting on one: work.cpp) -------------------------------------------------

namespace {

Work make_work(std::vector<c10::intrusive_ptr<c10d::Work>> works, std::string op, const ProcessGroup* group,
               std::function<void()> on_complete = {}, uint64_t sequence = 0) {
  auto state = std::make_shared<Work::State>();
  state->works = std::move(works);
  state->op = std::move(op);
  state->group = group;
  state->on_complete = std::move(on_complete);
  state->sequence = sequence;
  return Work(std::move(state));
}

// A collective's handle, numbered in its group (see Work).
Work numbered(CollectiveProgress& progress, const ProcessGroup* group, c10::intrusive_ptr<c10d::Work> work,
              std::string op, std::function<void()> on_complete = {}) {
  const uint64_t sequence = progress.next();
  return make_work({std::move(work)}, std::move(op), group, std::move(on_complete), sequence);
}

}  // namespace

// ---- ProcessGroup ----------------------------------------------------------------------------

ProcessGroup::ProcessGroup(std::unique_ptr<Impl> impl, std::string name, std::vector<int> global_ranks, int rank,
                           Backend backend, std::chrono::milliseconds timeout)
    : impl_(std::move(impl)),
      name_(std::move(name)),
      global_ranks_(std::move(global_ranks)),
      rank_(rank),
      backend_(backend),
      timeout_(timeout) {}

ProcessGroup::~ProcessGroup() { close(); }

ProcessGroup::Impl& ProcessGroup::live(const char* op) const {
  if (!impl_->backend) {
    throw DistError(fmt::format("{} on group {}: the group was closed; create a new group instead", op, describe()));
  }
  return *impl_;
}

bool ProcessGroup::closed() const { return !impl_->backend; }

void ProcessGroup::close() noexcept { close(std::min(timeout_, kCloseLimit)); }

void ProcessGroup::close(std::chrono::milliseconds limit) noexcept {
  if (!impl_->backend) return;
  try {
    const std::string what = fmt::format("closing group {}", describe());
    // Moved out: from here on every operation says the group is closed.
    close_backend(std::move(impl_->backend), impl_->cuda_device, what, limit);
  } catch (const std::exception& e) {  // a thread that could not be started, or out of memory
    std::fprintf(stderr, "colo: closing group %s: %s\n", name_.c_str(), e.what());
  }
}

void ProcessGroup::store_set(const std::string& key, const std::string& value) {
  try {
    impl_->store->set(key, std::vector<uint8_t>(value.begin(), value.end()));
  } catch (const std::exception& e) {
    throw DistError(fmt::format("rank {} of group {}: setting store key '{}' failed: {}", rank_, describe(), key,
                                e.what()));
  }
}

std::string ProcessGroup::store_get(const std::string& key) {
  try {
    const std::vector<uint8_t> bytes = impl_->store->get(key);
    return std::string(bytes.begin(), bytes.end());
  } catch (const std::exception& e) {
    std::string what = e.what();
    what = what.substr(0, what.find("\nException raised from"));
    throw DistError(fmt::format("rank {} of group {}: waiting for store key '{}' failed: {} (the rank that sets it may "
                                "have died or not reached that point)",
                                rank_, describe(), key, what));
  }
}

bool ProcessGroup::store_is_file() const {
  const c10d::Store* store = impl_->store.get();
  if (const auto* signed_store = dynamic_cast<const SignedStore*>(store)) store = signed_store->inner().get();
  return dynamic_cast<const c10d::FileStore*>(store) != nullptr;
}

namespace {
int64_t traffic_bytes_of(const torch::Tensor& tensor) {
  return static_cast<int64_t>(tensor.numel()) * static_cast<int64_t>(tensor.element_size());
}
}  // namespace

std::string ProcessGroup::describe() const {
  return fmt::format("{} ({}, global ranks {})", name_, backend_name(backend_), fmt::join(global_ranks_, ","));
}

Work ProcessGroup::all_reduce(torch::Tensor tensor, ReduceOp op) {
  auto& backend = *live("all_reduce").backend;
  require_same_device_kind(tensor, backend_, "all_reduce");
  count_collective(2 * (size() - 1) * traffic_bytes_of(tensor));
  std::vector<at::Tensor> tensors{tensor};
  c10d::AllreduceOptions options;
  options.reduceOp = to_c10d(op, backend_);
  options.timeout = timeout_;
  auto work = backend.allreduce(tensors, options);
  std::function<void()> finish;
  if (op == ReduceOp::kAvg && backend_ != Backend::kNccl) {
    const int n = size();
    finish = [tensor, n]() mutable { tensor.div_(n); };
  }
  return make_work({work}, "all_reduce", this, std::move(finish), impl_->progress->next());
}

Work ProcessGroup::all_gather(torch::Tensor output, torch::Tensor input) {
  auto& backend = *live("all_gather").backend;
  require_same_device_kind(input, backend_, "all_gather");
  if (output.size(0) != size() * input.size(0)) {
    throw std::invalid_argument(fmt::format("all_gather on {}: output has {} rows, expected {} x {}", describe(),
                                            output.size(0), size(), input.size(0)));
  }
  count_collective((size() - 1) * traffic_bytes_of(output));
  if (backend_ == Backend::kNccl) {
    return numbered(*impl_->progress, this, backend._allgather_base(output, input), "all_gather");
  }
  // Gloo gathers into a list of tensors: the output's row blocks are contiguous views of it.
  std::vector<std::vector<at::Tensor>> outputs{output.contiguous().chunk(size(), 0)};
  std::vector<at::Tensor> inputs{input.contiguous()};
  auto work = backend.allgather(outputs, inputs);
  std::function<void()> finish;
  if (!output.is_contiguous()) {
    auto staged = outputs[0];
    finish = [output, staged]() mutable { output.copy_(torch::cat(staged, 0)); };
  }
  return make_work({work}, "all_gather", this, std::move(finish), impl_->progress->next());
}

Work ProcessGroup::reduce_scatter(torch::Tensor output, torch::Tensor input, ReduceOp op) {
  auto& backend = *live("reduce_scatter").backend;
  require_same_device_kind(input, backend_, "reduce_scatter");
  if (input.size(0) != size() * output.size(0)) {
    throw std::invalid_argument(fmt::format("reduce_scatter on {}: input has {} rows, expected {} x {}", describe(),
                                            input.size(0), size(), output.size(0)));
  }
  count_collective((size() - 1) * traffic_bytes_of(input));
  if (compat::backend_has_reduce_scatter(backend)) {
    c10d::ReduceScatterOptions options;
    options.reduceOp = to_c10d(op, backend_);
    options.timeout = timeout_;
    return numbered(*impl_->progress, this, backend._reduce_scatter_base(output, input, options), "reduce_scatter");
  }
  // Emulation: all-reduce a copy and keep this rank's rows. Correct, at n times the traffic;
  // only Gloo takes this path (the CPU build, and COLO_BACKEND=gloo, where the tensors may be
  // CUDA tensors: Gloo's all-reduce copies them through host memory itself).
  auto reduced = input.clone();
  std::vector<at::Tensor> tensors{reduced};
  c10d::AllreduceOptions options;
  options.reduceOp = to_c10d(op, backend_);
  options.timeout = timeout_;
  auto work = backend.allreduce(tensors, options);
  const int n = size();
  const int r = rank();
  const bool average = op == ReduceOp::kAvg;
  return numbered(*impl_->progress, this, work, "reduce_scatter", [output, reduced, n, r, average]() mutable {
    auto mine = reduced.chunk(n, 0)[r];
    if (average) mine = mine / n;
    output.copy_(mine);
  });
}

Work ProcessGroup::broadcast(torch::Tensor tensor, int src) {
  auto& backend = *live("broadcast").backend;
  require_same_device_kind(tensor, backend_, "broadcast");
  count_collective(src == rank() ? 0 : size() * traffic_bytes_of(tensor));
  std::vector<at::Tensor> tensors{tensor};
  c10d::BroadcastOptions options;
  options.rootRank = src;
  options.timeout = timeout_;
  return numbered(*impl_->progress, this, backend.broadcast(tensors, options), fmt::format("broadcast from {}", src));
}

namespace {

// Gloo posts a send or a receive on its connection within the call, so a peer that has gone can
// show there instead of at the wait: the same DistError as the wait's, whichever comes first.
template <class Issue>
auto issue_point_to_point(const ProcessGroup& group, const std::string& op, Issue&& issue) {
  try {
    return issue();
  } catch (const DistError&) {
    throw;
  } catch (const std::exception& e) {
    std::string what = e.what();
    what = what.substr(0, what.find("\nException raised from"));  // drop c10's C++ stack trace
    throw DistError(fmt::format("{} on group {} failed: {} (a peer may have died or be stuck; its own log says why)",
                                op, group.describe(), what));
  }
}

}  // namespace

// Over Gloo, point-to-point tensors that are not contiguous CPU tensors (CUDA tensors under
// COLO_BACKEND=gloo) travel through host copies (host_staging.h); a received one reaches its
// tensor in wait(). NCCL takes CUDA tensors as they are.
Work ProcessGroup::send(torch::Tensor tensor, int dst, int tag) {
  auto& backend = *live("send").backend;
  HostStaging staging;
  std::vector<at::Tensor> tensors{backend_ == Backend::kGloo ? staging.outgoing(tensor) : tensor};
  const auto op = fmt::format("send to {}", dst);
  sent_p2p_ += traffic_bytes_of(tensor);
  auto work = issue_point_to_point(*this, op, [&] { return backend.send(tensors, dst, tag); });
  return make_work({std::move(work)}, op, this);
}

Work ProcessGroup::recv(torch::Tensor tensor, int src, int tag) {
  auto& backend = *live("recv").backend;
  HostStaging staging;
  std::vector<at::Tensor> tensors{backend_ == Backend::kGloo ? staging.incoming(tensor) : tensor};
  const auto op = fmt::format("recv from {}", src);
  received_p2p_ += traffic_bytes_of(tensor);
  auto work = issue_point_to_point(*this, op, [&] { return backend.recv(tensors, src, tag); });
  return make_work({std::move(work)}, op, this, staging.completion());
}

Work ProcessGroup::batch_send_recv(const std::vector<P2POp>& ops) {
  auto& backend = *live("batch_send_recv").backend;
  HostStaging staging;
  const bool staged = backend_ == Backend::kGloo;
  const auto name = fmt::format("batch_send_recv ({} ops)", ops.size());
  for (const auto& op : ops) (op.kind == P2POp::Kind::kSend ? sent_p2p_ : received_p2p_) += traffic_bytes_of(op.tensor);
  auto works = issue_point_to_point(*this, name, [&] {
    std::vector<c10::intrusive_ptr<c10d::Work>> issued;
    compat::start_coalescing(backend);
    for (const auto& op : ops) {
      const bool sending = op.kind == P2POp::Kind::kSend;
      std::vector<at::Tensor> tensors{op.tensor};
      if (staged) tensors[0] = sending ? staging.outgoing(op.tensor) : staging.incoming(op.tensor);
      issued.push_back(sending ? backend.send(tensors, op.peer, op.tag) : backend.recv(tensors, op.peer, op.tag));
    }
    if (auto coalesced = compat::end_coalescing(backend)) issued = {coalesced};
    return issued;
  });
  return make_work(std::move(works), name, this, staging.completion());
}

Traffic ProcessGroup::traffic() const {
  return Traffic{collectives_.load(), static_cast<double>(received_times_size_.load()) / size(), sent_p2p_.load(),
                 received_p2p_.load()};
}

void ProcessGroup::reset_traffic() {
  collectives_ = 0;
  received_times_size_ = 0;
  sent_p2p_ = 0;
  received_p2p_ = 0;
}

void ProcessGroup::count_collective(int64_t received_bytes_times_size) {
  ++collectives_;
  received_times_size_ += received_bytes_times_size;
}

Work ProcessGroup::barrier() {
  auto& backend = *live("barrier").backend;
  c10d::BarrierOptions options;
  options.timeout = timeout_;
  return make_work({backend.barrier(options)}, "barrier", this, {}, impl_->progress->next());
}

torch::Tensor ProcessGroup::communicable(const torch::Tensor& tensor) const {
  if (backend_ == Backend::kNccl && !tensor.is_cuda()) return tensor.to(torch::Device(torch::kCUDA));
  return tensor;
}

void ProcessGroup::all_reduce_and_wait(torch::Tensor& value, ReduceOp op) {
  if (size() == 1) return;
  auto travelling = communicable(value);
  all_reduce(travelling, op).wait();
  if (!travelling.is_same(value)) value = travelling.to(value.device());
}

std::shared_ptr<ProcessGroup> ProcessGroup::new_subgroup(const std::vector<int>& global_ranks,
                                                         const std::string& name,
                                                         std::optional<std::chrono::milliseconds> timeout) {
  const auto group_timeout = timeout.value_or(timeout_);
  int my_rank = -1;
  for (size_t i = 0; i < global_ranks.size(); ++i) {
    if (global_ranks[i] == global_rank(rank_)) my_rank = static_cast<int>(i);
  }
  if (my_rank < 0) {
    throw std::invalid_argument(fmt::format("rank {} called new_subgroup('{}') for ranks [{}] it is not part of",
                                            global_rank(rank_), name, fmt::join(global_ranks, ",")));
  }
  live("new_subgroup");
  const std::string key = fmt::format("{}[{}]", name, fmt::join(global_ranks, ","));
  const int generation = (*impl_->creations)[key]++;
  const std::string prefix = fmt::format("colo/group/{}/{}", key, generation);
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(prefix, impl_->store);
  auto impl = std::make_unique<Impl>();
  try {
    impl->backend = make_backend(backend_, prefixed, my_rank, static_cast<int>(global_ranks.size()), group_timeout,
                                 impl_->loopback_only, impl->peers);
  } catch (const std::exception& e) {
    // Usually a member that never asked for the group (or asked with other ranks or another name),
    // or one that died: the backend's own words name a store key, not the group.
    throw DistError(fmt::format(
        "rank {}: creating the {} group '{}' of global ranks [{}] failed: {}. Every member must call new_subgroup "
        "with the same ranks and name, in the same order as its other group creations; one that did not, or died, "
        "leaves the others waiting up to the group's timeout ({} ms)",
        global_rank(rank_), backend_name(backend_), name, fmt::join(global_ranks, ","), e.what(),
        group_timeout.count()));
  }
  impl->creations = impl_->creations;
  impl->store = impl_->store;
  impl->loopback_only = impl_->loopback_only;
  impl->run_reports = impl_->run_reports;
  impl->progress = std::make_unique<CollectiveProgress>(impl_->store, prefix, my_rank, global_ranks);
  if (backend_ == Backend::kNccl) impl->cuda_device = compat::current_cuda_device();
  return std::shared_ptr<ProcessGroup>(
      new ProcessGroup(std::move(impl), name, global_ranks, my_rank, backend_, group_timeout));
}

namespace {

// Whether nothing of the job need be reachable from another machine: every rank runs here, and
// they meet here (a store file, or rank 0's store on a loopback address). LOCAL_WORLD_SIZE alone
// would not do: launched by hand it defaults to WORLD_SIZE.
bool every_rank_on_this_machine(const Environment& env) {
  if (!env.is_single_node()) return false;
  if (!env.rdzv_file.empty()) return true;
  const std::string& addr = env.master_addr;
  return addr == "localhost" || addr == "::1" || addr.rfind("127.", 0) == 0;
}

}  // namespace

std::shared_ptr<ProcessGroup> init_world(const Environment& env, const ProcessGroup::Options& options) {
  constexpr const char* kWorldPrefix = "colo/world";
  const Backend backend = options.backend ? *options.backend : default_backend();
  env::inject_fault_before_start(env.rank);  // COLO_FAULT's nostart (tests of restarts)
  if (backend == Backend::kNccl) {
    // NCCL needs each rank of a node on a GPU of its own, and the communicator made below lives on
    // the current one: cuda:<local_rank>, as select_device gives every colo program. A program that
    // makes the world before it picks its device (colo_dist_tests did) would otherwise put every
    // rank on cuda:0 ("Duplicate GPU detected", 4 ranks on 4 H200s, 2026-11-27).
    const int gpus = static_cast<int>(torch::cuda::device_count());
    if (env.local_rank >= gpus) {
      throw DistError(fmt::format("rank {}: NCCL needs a GPU for each rank of a node; local rank {} has none (this node "
                                  "has {} GPU(s)): start at most {} ranks per node",
                                  env.rank, env.local_rank, gpus, gpus));
    }
    compat::set_current_cuda_device(env.local_rank);
  }
  auto store = rendezvous(env, options.timeout);
  auto impl = std::make_unique<ProcessGroup::Impl>();
  impl->loopback_only = every_rank_on_this_machine(env);
  impl->run_reports = env.run_reports;
  try {
    impl->backend = make_backend(backend, c10::make_intrusive<c10d::PrefixStore>(kWorldPrefix, store), env.rank,
                                 env.world_size, options.timeout, impl->loopback_only, impl->peers);
  } catch (const std::exception& e) {
    throw DistError(fmt::format("rank {}: creating the {} world group of {} ranks failed: {}", env.rank,
                                backend_name(backend), env.world_size, e.what()));
  }
  impl->creations = std::make_shared<std::map<std::string, int>>();
  if (backend == Backend::kNccl) impl->cuda_device = compat::current_cuda_device();
  std::vector<int> ranks(env.world_size);
  for (int r = 0; r < env.world_size; ++r) ranks[r] = r;
  impl->store = store;
  impl->progress = std::make_unique<CollectiveProgress>(store, kWorldPrefix, env.rank, ranks);
  const auto cuda_device = impl->cuda_device;
  auto world = std::shared_ptr<ProcessGroup>(
      new ProcessGroup(std::move(impl), "world", ranks, env.rank, backend, options.timeout));
  // NCCL makes a communicator at its first collective, with allocations of its own outside
  // LibTorch's caching allocator. Made later, once the cache holds the GPU (gemini's auto placement
  // fills it), they fail ("Failed to CUDA calloc async 24 bytes"): make it now, before any model.
  if (backend == Backend::kNccl) {
    auto one = torch::zeros({1}, torch::TensorOptions().device(torch::kCUDA, cuda_device));
    world->all_reduce_and_wait(one);
  }
  return world;
}

std::chrono::milliseconds timeout_from_env(std::chrono::milliseconds fallback) {
  return Environment::timeout_from(env::process_environment()).value_or(fallback);
}

}  // namespace colo::dist
