#pragma once

#include <torch/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace colo::dist {

struct Environment;
class ProcessGroup;

enum class ReduceOp { kSum, kAvg, kMax, kMin, kProduct };
enum class Backend { kGloo, kNccl };

// Handle of an asynchronous operation. wait() makes its result safe to use, runs the operation's
// completion step (e.g. the division of an average), and turns any c10d failure or timeout
// into a DistError naming the operation and the group. Waiting twice is harmless. Over Gloo
// wait() blocks until the operation ends; over NCCL it makes the current CUDA stream wait for
// it and returns at once (work queued after it, and reads of the result, see the result), and
// a timeout is enforced by NCCL's watchdog, which ends the process. A receive over Gloo into a
// tensor Gloo cannot write (a CUDA tensor under COLO_BACKEND=gloo) lands in it in wait():
// is_completed() says only that the transfer has ended.
//
// Collectives are numbered per group (#1, #2, ... alike on every member). Over Gloo, a
// collective that times out names the members that did not arrive at it and where each was last
// seen waiting ("rank 1 (global 3), never seen waiting in this group"); see collective_progress.h.
// Over NCCL the watchdog ends the process first: its message carries NCCL's own sequence number.
class Work {
 public:
  // An empty handle (nothing was launched, e.g. a collective skipped in a world of one): wait()
  // returns at once.
  Work() = default;
  // The backend's handles and what wait() needs to report a failure; defined where groups create
  // their operations (process_group.cpp), opaque elsewhere. Shared: copies of a Work are one
  // operation, and its completion step runs once.
  struct State;
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}

  void wait();
  bool is_completed();

 private:
  std::shared_ptr<State> state_;
};

// One point-to-point operation of a batch (see ProcessGroup::batch_send_recv).
struct P2POp {
  enum class Kind { kSend, kRecv } kind;
  torch::Tensor tensor;
  int peer;  // rank within the group
  int tag = 0;
};

// What this rank's collectives on one group have moved since the group was made or the count
// reset (ProcessGroup::traffic), counted as they are issued, in the accounting of
// docs/tensor_parallel_modes.md: a broadcast delivers its tensor once to every rank but the source;
// an all-gather (output of N bytes) or a reduce-scatter (input of N bytes) over p ranks brings
// (p−1)/p·N to each rank; an all-reduce twice that. A reduce-scatter counts as one even where Gloo
// emulates it with an all-reduce. Point-to-point sends and receives count their bytes apart.
struct Traffic {
  int64_t collectives = 0;
  double received_bytes = 0;  // by the collectives
  int64_t sent_p2p_bytes = 0;
  int64_t received_p2p_bytes = 0;
};

// A group of ranks and the collectives over it, a thin wrapper over one c10d backend (Gloo or
// NCCL). Ranks passed to and returned by methods are ranks within this group unless the
// name says global. Every operation has the group's timeout. Groups are created only through
// init_world() and new_subgroup(), never as globals.
class ProcessGroup {
 public:
  struct Options {
    std::chrono::milliseconds timeout{std::chrono::minutes(5)};
    // Default: COLO_BACKEND when set, else NCCL where a CUDA GPU is visible, else Gloo (backend_choice.h).
    std::optional<Backend> backend;
  };

  // Closes the group (see close()).
  ~ProcessGroup();

  // Ends the group for good. Over NCCL it first waits for the GPU work queued on this rank to
  // finish, so that peers are not cut off in the middle of a collective, then aborts the
  // communicators; then it destroys the backend, which joins its threads (NCCL's watchdog must
  // not outlive the CUDA runtime at process exit; Gloo's first finish their queued work). Each of
  // the two waits lasts at most 30 s (or the group's timeout when shorter): beside a dead peer
  // close() prints what it gave up on and returns. Every operation on a closed group throws
  // DistError. Idempotent; never throws. Groups the program owns are closed by their destructor;
  // the world group that PluginRegistry creates is closed when the process exits.
  void close() noexcept;
  // The same with another bound on each wait.
  void close(std::chrono::milliseconds limit) noexcept;
  bool closed() const;

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(global_ranks_.size()); }
  const std::vector<int>& global_ranks() const { return global_ranks_; }
  int global_rank(int group_rank) const { return global_ranks_.at(group_rank); }
  const std::string& name() const { return name_; }
  Backend backend() const { return backend_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // "dp[1] (global ranks 1,3)": what error messages call this group.
  std::string describe() const;

  // In place over all ranks. kAvg is exact for floating tensors.
  Work all_reduce(torch::Tensor tensor, ReduceOp op = ReduceOp::kSum);
  // output = concatenation along dim 0 of every rank's input (output.size(0) = size * input.size(0)).
  Work all_gather(torch::Tensor output, torch::Tensor input);
  // output = this rank's slice (dim 0) of the reduction of every rank's input. Emulated with an
  // all-reduce where the backend has no reduce-scatter (Gloo in LibTorch 1.13).
  Work reduce_scatter(torch::Tensor output, torch::Tensor input, ReduceOp op = ReduceOp::kSum);
  Work broadcast(torch::Tensor tensor, int src);
  // Point-to-point. Over Gloo, a tensor that is not a contiguous CPU tensor (a CUDA tensor under
  // COLO_BACKEND=gloo, a strided view) travels through a host copy: a send copies it at once,
  // after the work queued on the current CUDA stream; a receive copies it in on wait().
  Work send(torch::Tensor tensor, int dst, int tag = 0);
  Work recv(torch::Tensor tensor, int src, int tag = 0);
  // Posts all sends and receives together so that neighbours never deadlock, one handle for all.
  Work batch_send_recv(const std::vector<P2POp>& ops);
  Work barrier();

  // What this rank's operations on the group have moved (Traffic), and a fresh count. Safe to
  // read while collectives are issued from other threads (the autograd engine's).
  Traffic traffic() const;
  void reset_traffic();

  // `tensor` itself where this group's backend can communicate it, else a copy on the current
  // CUDA device: NCCL takes CUDA tensors only, and small host values (a norm of offloaded
  // gradients, an overflow flag) travel to the GPU for the collective. Gloo takes both: its
  // collectives copy CUDA tensors through host memory themselves, and send/recv do it here.
  torch::Tensor communicable(const torch::Tensor& tensor) const;
  // all_reduce of a tensor on any device, waited for: `value` holds the result on its own device.
  void all_reduce_and_wait(torch::Tensor& value, ReduceOp op = ReduceOp::kSum);

  // Creates the subgroup of the given global ranks. Called by every member (non-members must not
  // call it); members must create their groups in the same order.
  // `timeout` defaults to this group's.
  std::shared_ptr<ProcessGroup> new_subgroup(const std::vector<int>& global_ranks, const std::string& name,
                                             std::optional<std::chrono::milliseconds> timeout = std::nullopt);

  // The job's shared key-value store, for small exchanges between ranks (a path, a manifest).
  // Keys belong to the whole job, not to this group: make them unique. store_get waits until the
  // key is set and throws a DistError naming it when it is not within the rendezvous timeout.
  void store_set(const std::string& key, const std::string& value);
  std::string store_get(const std::string& key);
  // True when the store is a file (a job of one, or COLO_RDZV_FILE): no network port is used.
  bool store_is_file() const;

 private:
  friend std::shared_ptr<ProcessGroup> init_world(const Environment&, const Options&);
  friend class Work;  // records and reads the members' progress (Impl) when a wait is slow
  // The backend, the job's store and the collectives' progress (process_group.cpp).
  struct Impl;
  ProcessGroup(std::unique_ptr<Impl> impl, std::string name, std::vector<int> global_ranks, int rank,
               Backend backend, std::chrono::milliseconds timeout);

  // impl_, or a DistError naming `op` when the group is closed.
  Impl& live(const char* op) const;

  std::unique_ptr<Impl> impl_;
  std::string name_;
  std::vector<int> global_ranks_;
  int rank_;
  Backend backend_;
  std::chrono::milliseconds timeout_;
  // Traffic's counts; received bytes kept times the group's size, so that they stay whole numbers.
  void count_collective(int64_t received_bytes_times_size);
  std::atomic<int64_t> collectives_{0};
  std::atomic<int64_t> received_times_size_{0};
  std::atomic<int64_t> sent_p2p_{0};
  std::atomic<int64_t> received_p2p_{0};
};

// Rendezvous (a FileStore when env.rdzv_file is set, else a TCPStore served by rank 0 at
// master_addr:master_port) and the group of all ranks. The timeout also bounds the rendezvous:
// a rank that never arrives ends it with a DistError naming who is missing. With env.job_token
// (COLO_JOB_TOKEN) only processes that hold the token are admitted, and every value read from the
// store must be signed with it (a process without it is refused, and rank 0 logs the attempt).
// When every rank runs on this machine (a store file, or a loopback master_addr, and
// local_world_size = world_size), Gloo's pairs listen on 127.0.0.1 only. Over Gloo, a collective
// that fails because a member's connection went away names that member.
std::shared_ptr<ProcessGroup> init_world(const Environment& env, const ProcessGroup::Options& options = {});

// Milliseconds from COLO_TIMEOUT_MS when set, else the fallback. A value that is not a whole
// number from 1 to Environment::kMaxTimeoutMs throws env::VariableError naming the variable.
std::chrono::milliseconds timeout_from_env(std::chrono::milliseconds fallback);

}  // namespace colo::dist
