#include "rendezvous.h"

#include <colo/compat/torch_compat.h>
#include <colo/dist/environment.h>
#include <colo/dist/errors.h>
#include <colo/dist/process_group.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/cuda.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <map>
#include <mutex>
#include <thread>

namespace colo::dist {

struct ProcessGroup::Impl {
  compat::CommBackendPtr backend;
  // How many groups each (name, ranks) key has produced, so that creating the same group
  // twice uses fresh store keys. Shared by a world and all its subgroups.
  std::shared_ptr<std::map<std::string, int>> creations;
  // The GPU the group's NCCL communicators belong to (the device current when it was created);
  // -1 for Gloo.
  int cuda_device = -1;
};

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

Backend default_backend() {
  return compat::kHasNccl && torch::cuda::is_available() ? Backend::kNccl : Backend::kGloo;
}

compat::CommBackendPtr make_backend(Backend backend, const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                    int size, std::chrono::milliseconds timeout) {
  if (backend == Backend::kNccl) {
#ifdef USE_C10D_NCCL
    return compat::make_nccl_backend(store, rank, size, timeout);
#else
    throw std::invalid_argument("the NCCL backend was requested but this LibTorch has no NCCL; use gloo");
#endif
  }
  return compat::make_gloo_backend(store, rank, size, timeout);
}

// How long each of close()'s two waits lasts at most: enough for any collective of a healthy job
// and for a backend's shutdown, short enough that an exit beside a dead peer is not held up for a
// whole group timeout.
constexpr std::chrono::milliseconds kCloseLimit{std::chrono::seconds(30)};

// Runs `work` on a thread of its own and waits up to `limit` for it; false when it did not end in
// time. The thread is then left behind: what it waits for (a collective whose peer died, a backend
// destructor waiting for such a collective) may never end, and close() must still return. `work`
// owns everything it touches. A failure is printed, prefixed with `what`.
bool finishes_within(std::chrono::milliseconds limit, const std::string& what, std::function<void()> work) {
  auto finished = std::make_shared<std::promise<void>>();
  auto future = finished->get_future();
  std::thread([finished, what, work = std::move(work)] {
    try {
      work();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "colo: %s: %s\n", what.c_str(), e.what());
    } catch (...) {
      std::fprintf(stderr, "colo: %s: unknown error\n", what.c_str());
    }
    finished->set_value();
  }).detach();
  return future.wait_for(limit) == std::future_status::ready;
}

// close()'s work: drains the GPU the backend's communicators belong to (cuda_device; -1: none),
// aborts the backend and drops it, each of the two steps bounded by `limit`.
void close_backend(compat::CommBackendPtr backend, int cuda_device, const std::string& what,
                   std::chrono::milliseconds limit) {
  if (cuda_device >= 0) {
    const bool drained = finishes_within(limit, what, [cuda_device] { torch::cuda::synchronize(cuda_device); });
    if (!drained) {
      std::fprintf(stderr,
                   "colo: %s: the GPU work queued on it did not finish within %lld ms (a peer may have died in the "
                   "middle of a collective); aborting its communicators\n",
                   what.c_str(), static_cast<long long>(limit.count()));
    }
  }
  // Abort (NCCL: communicators, then the watchdog threads are told to end), then drop the last
  // reference: the destructor joins the backend's threads (Gloo: after its queued work).
  const bool stopped = finishes_within(limit, what, [backend = std::move(backend)]() mutable {
    compat::abort_backend(*backend);
    backend.reset();
  });
  if (!stopped) {
    std::fprintf(stderr, "colo: %s: its backend did not shut down within %lld ms; leaving it behind\n", what.c_str(),
                 static_cast<long long>(limit.count()));
  }
}

void require_same_device_kind(const torch::Tensor& t, Backend backend, const char* op) {
  if (backend == Backend::kNccl && !t.is_cuda()) {
    throw std::invalid_argument(fmt::format("{} over NCCL needs CUDA tensors, got a {} tensor", op, t.device().str()));
  }
}

}  // namespace

// ---- Work ------------------------------------------------------------------------------------

Work::Work(std::vector<c10::intrusive_ptr<c10d::Work>> works, std::string op, const ProcessGroup* group,
           std::function<void()> on_complete)
    : works_(std::move(works)), op_(std::move(op)), group_(group), on_complete_(std::move(on_complete)) {}

void Work::wait() {
  if (done_) return;
  try {
    // A default Work (nothing launched, e.g. a collective skipped in a world of one) has no group.
    if (group_ && group_->backend() == Backend::kNccl) {
      // Without a timeout, NCCL's wait only makes the current CUDA stream wait for the
      // collective; with one, it also blocks this thread until the collective ends, so the host
      // could not queue the work that follows ahead of the GPU. (On 2 H200s, ViT-B/16 torch_ddp,
      // the step time did not measurably change: the host was far enough ahead either way.)
      // Timeouts stay enforced: the NCCL watchdog applies the group's timeout (set on every
      // collective) and ends the process, which colo-run reports with the rank that stopped.
      for (auto& w : works_) {
        if (w) w->wait();
      }
    } else {
      for (auto& w : works_) {
        if (w && !w->wait(group_->timeout())) {
          throw DistError(fmt::format("timed out after {} ms", group_->timeout().count()));
        }
      }
    }
  } catch (const std::exception& e) {
    done_ = true;
    std::string what = e.what();
    what = what.substr(0, what.find("\nException raised from"));  // drop c10's C++ stack trace
    throw DistError(fmt::format("{} on group {} failed: {} (a peer may have died or be stuck; its own log says why)",
                                op_, group_->describe(), what));
  }
  done_ = true;
  if (on_complete_) on_complete_();
}

bool Work::is_completed() {
  for (auto& w : works_) {
    if (w && !w->isCompleted()) return false;
  }
  return true;
}

// ---- ProcessGroup ----------------------------------------------------------------------------

ProcessGroup::ProcessGroup(std::unique_ptr<Impl> impl, c10::intrusive_ptr<c10d::Store> store, std::string name,
                           std::vector<int> global_ranks, int rank, Backend backend,
                           std::chrono::milliseconds timeout)
    : impl_(std::move(impl)),
      store_(std::move(store)),
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

std::string ProcessGroup::describe() const {
  return fmt::format("{} ({}, global ranks {})", name_, backend_name(backend_), fmt::join(global_ranks_, ","));
}

Work ProcessGroup::all_reduce(torch::Tensor tensor, ReduceOp op) {
  auto& backend = *live("all_reduce").backend;
  require_same_device_kind(tensor, backend_, "all_reduce");
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
  return Work({work}, "all_reduce", this, std::move(finish));
}

Work ProcessGroup::all_gather(torch::Tensor output, torch::Tensor input) {
  auto& backend = *live("all_gather").backend;
  require_same_device_kind(input, backend_, "all_gather");
  if (output.size(0) != size() * input.size(0)) {
    throw std::invalid_argument(fmt::format("all_gather on {}: output has {} rows, expected {} x {}", describe(),
                                            output.size(0), size(), input.size(0)));
  }
  if (backend_ == Backend::kNccl) {
    return Work({backend._allgather_base(output, input)}, "all_gather", this);
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
  return Work({work}, "all_gather", this, std::move(finish));
}

Work ProcessGroup::reduce_scatter(torch::Tensor output, torch::Tensor input, ReduceOp op) {
  auto& backend = *live("reduce_scatter").backend;
  require_same_device_kind(input, backend_, "reduce_scatter");
  if (input.size(0) != size() * output.size(0)) {
    throw std::invalid_argument(fmt::format("reduce_scatter on {}: input has {} rows, expected {} x {}", describe(),
                                            input.size(0), size(), output.size(0)));
  }
  if (compat::backend_has_reduce_scatter(backend)) {
    c10d::ReduceScatterOptions options;
    options.reduceOp = to_c10d(op, backend_);
    options.timeout = timeout_;
    return Work({backend._reduce_scatter_base(output, input, options)}, "reduce_scatter", this);
  }
  // Emulation: all-reduce a copy and keep this rank's rows. Correct, at n times the traffic;
  // only the CPU build (Gloo) takes this path.
  auto reduced = input.clone();
  std::vector<at::Tensor> tensors{reduced};
  c10d::AllreduceOptions options;
  options.reduceOp = to_c10d(op, backend_);
  options.timeout = timeout_;
  auto work = backend.allreduce(tensors, options);
  const int n = size();
  const int r = rank();
  const bool average = op == ReduceOp::kAvg;
  return Work({work}, "reduce_scatter", this, [output, reduced, n, r, average]() mutable {
    auto mine = reduced.chunk(n, 0)[r];
    if (average) mine = mine / n;
    output.copy_(mine);
  });
}

Work ProcessGroup::broadcast(torch::Tensor tensor, int src) {
  auto& backend = *live("broadcast").backend;
  require_same_device_kind(tensor, backend_, "broadcast");
  std::vector<at::Tensor> tensors{tensor};
  c10d::BroadcastOptions options;
  options.rootRank = src;
  options.timeout = timeout_;
  return Work({backend.broadcast(tensors, options)}, fmt::format("broadcast from {}", src), this);
}

Work ProcessGroup::send(torch::Tensor tensor, int dst, int tag) {
  auto& backend = *live("send").backend;
  std::vector<at::Tensor> tensors{tensor};
  return Work({backend.send(tensors, dst, tag)}, fmt::format("send to {}", dst), this);
}

Work ProcessGroup::recv(torch::Tensor tensor, int src, int tag) {
  auto& backend = *live("recv").backend;
  std::vector<at::Tensor> tensors{tensor};
  return Work({backend.recv(tensors, src, tag)}, fmt::format("recv from {}", src), this);
}

Work ProcessGroup::batch_send_recv(const std::vector<P2POp>& ops) {
  auto& backend = *live("batch_send_recv").backend;
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  compat::start_coalescing(backend);
  for (const auto& op : ops) {
    std::vector<at::Tensor> tensors{op.tensor};
    works.push_back(op.kind == P2POp::Kind::kSend ? backend.send(tensors, op.peer, op.tag)
                                                  : backend.recv(tensors, op.peer, op.tag));
  }
  if (auto coalesced = compat::end_coalescing(backend)) works = {coalesced};
  return Work(std::move(works), fmt::format("batch_send_recv ({} ops)", ops.size()), this);
}

Work ProcessGroup::barrier() {
  auto& backend = *live("barrier").backend;
  c10d::BarrierOptions options;
  options.timeout = timeout_;
  return Work({backend.barrier(options)}, "barrier", this);
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
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(fmt::format("colo/group/{}/{}", key, generation), store_);
  auto impl = std::make_unique<Impl>();
  impl->backend = make_backend(backend_, prefixed, my_rank, static_cast<int>(global_ranks.size()), group_timeout);
  impl->creations = impl_->creations;
  if (backend_ == Backend::kNccl) impl->cuda_device = compat::current_cuda_device();
  return std::shared_ptr<ProcessGroup>(
      new ProcessGroup(std::move(impl), store_, name, global_ranks, my_rank, backend_, group_timeout));
}

std::shared_ptr<ProcessGroup> init_world(const Environment& env, const ProcessGroup::Options& options) {
  const Backend backend = options.backend.value_or(default_backend());
  auto store = rendezvous(env, options.timeout);
  auto impl = std::make_unique<ProcessGroup::Impl>();
  try {
    impl->backend = make_backend(backend, c10::make_intrusive<c10d::PrefixStore>("colo/world", store), env.rank,
                                 env.world_size, options.timeout);
  } catch (const std::exception& e) {
    throw DistError(fmt::format("rank {}: creating the {} world group of {} ranks failed: {}", env.rank,
                                backend_name(backend), env.world_size, e.what()));
  }
  impl->creations = std::make_shared<std::map<std::string, int>>();
  if (backend == Backend::kNccl) impl->cuda_device = compat::current_cuda_device();
  std::vector<int> ranks(env.world_size);
  for (int r = 0; r < env.world_size; ++r) ranks[r] = r;
  return std::shared_ptr<ProcessGroup>(
      new ProcessGroup(std::move(impl), store, "world", ranks, env.rank, backend, options.timeout));
}

std::chrono::milliseconds timeout_from_env(std::chrono::milliseconds fallback) {
  const char* raw = std::getenv("COLO_TIMEOUT_MS");
  if (!raw || !*raw) return fallback;
  try {
    return std::chrono::milliseconds(std::stoll(raw));
  } catch (const std::exception&) {
    throw std::invalid_argument(fmt::format("COLO_TIMEOUT_MS='{}' is not a number of milliseconds", raw));
  }
}

}  // namespace colo::dist
