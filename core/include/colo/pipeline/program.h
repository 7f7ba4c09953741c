#pragma once

#include <colo/pipeline/action.h>
#include <colo/pipeline/schedule.h>

#include <cstddef>
#include <string>
#include <variant>
#include <vector>

namespace colo::pipeline {

// Data that travels between neighbouring stages for one microbatch:
//   kind kForward:  the activation stage `from_stage` sends to `to_stage` = from_stage + 1 after
//                   its F;
//   kind kBackward: the input gradient stage `from_stage` sends to `to_stage` = from_stage - 1
//                   after its B.
// Text form "act 1->2 mb3", "grad 2->1 mb3".
struct Message {
  ActionKind kind = ActionKind::kForward;
  int from_stage = 0;
  int to_stage = 0;
  int microbatch = 0;

  std::string str() const;
  friend bool operator==(const Message& a, const Message& b) {
    return a.kind == b.kind && a.from_stage == b.from_stage && a.to_stage == b.to_stage && a.microbatch == b.microbatch;
  }
  friend bool operator!=(const Message& a, const Message& b) { return !(a == b); }
};

enum class CommKind { kSend, kRecv };

// One point-to-point operation: send `message` to, or receive it from, pp rank `peer`.
// Text form "send act 1->2 mb3 to 2", "recv grad 2->1 mb3 from 2".
struct CommOp {
  CommKind kind = CommKind::kSend;
  int peer = 0;
  Message message;

  std::string str() const;
  friend bool operator==(const CommOp& a, const CommOp& b) {
    return a.kind == b.kind && a.peer == b.peer && a.message == b.message;
  }
  friend bool operator!=(const CommOp& a, const CommOp& b) { return !(a == b); }
};

// Point-to-point operations posted together and waited for together (NCCL's grouped send/recv,
// torch's batch_isend_irecv): the batch completes when every one of its operations has been
// matched by the peer's. Several operations with the same peer in one batch match the peer's in
// the order listed.
struct CommBatch {
  std::vector<CommOp> ops;
};

// One step of a rank's program: compute an action, or run a communication batch.
struct Step {
  std::variant<Action, CommBatch> op;
  // A compute step's position in the rank's action list (Schedule::actions[rank]); for a
  // communication step, the position of the action that runs next (the list's size after the
  // last action). Lets an error point at the schedule (format_rank_schedule()).
  std::size_t action_index = 0;

  bool is_compute() const { return std::holds_alternative<Action>(op); }
  // Throw std::bad_variant_access for a step of the other kind.
  const Action& action() const { return std::get<Action>(op); }
  const std::vector<CommOp>& comm() const { return std::get<CommBatch>(op).ops; }
  // "1F3", or "{send act 1->2 mb3 to 2, recv grad 2->1 mb0 from 2}".
  std::string str() const;
};

// What one pp rank runs, step after step.
struct RankProgram {
  int rank = 0;
  std::vector<Step> steps;
  // One step a line, each with its index.
  std::string str() const;
};

// What `action` receives before it runs (at most one message): an F of a stage other than the
// first, the previous stage's activation; a B of a stage other than the last, the next stage's
// input gradient; a W, nothing. `stages` is the number of virtual stages.
std::vector<Message> inputs_of(const Action& action, int stages);
// What `action` sends after it runs (at most one message): an F of a stage other than the last,
// its activation; a B of a stage other than the first, its input gradient; a W, nothing.
std::vector<Message> outputs_of(const Action& action, int stages);

// Lowers a schedule into one program per pp rank: its actions, with the communication they need
// in batches between them. Every input is received before the action that needs it, and every
// output is sent; with pp = 1 there is no communication at all.
//
// Where the batches go. NCCL's point-to-point operations are rendezvous for large tensors (a send
// completes only once the receiver has posted its receive), so a send posted while its receiver
// is busy computing stalls the sender, and two neighbours each sending before receiving deadlock.
// lower() therefore places each message where both ranks are between two computes at the same
// moment: it runs the schedule once on paper with reference costs (ActionCosts' defaults: F = 1,
// full B = 2, split B = W = 1, a chunk's action 1 / chunks of that; each action as soon as its
// inputs exist, sends buffered) and puts the send and the receive at the latest moment between the
// end of the producer and the start of the consumer at which neither rank is computing. All
// operations a rank has at one such point form one batch, posted and waited for together, as
// Megatron-LM's send_forward_recv_backward pairs a send with the next receive. For 1F1B this is
// Megatron's pattern exactly: after each action, one batch that sends its output and receives the
// next action's input. For interleaved schedules a batch can hold up to four operations (both
// directions with both neighbours).
//
// Why it cannot deadlock. Every send and its receive sit in batches that the two ranks reach at
// the same moment of the paper run, and each rank's batches come in increasing order of those
// moments. Run with the reference costs, every batch therefore finds its partners posted and
// completes at once: the run is the paper run, without a stall. Whether programs deadlock does not
// depend on timing (every operation has exactly one possible partner, by the matching rule
// below), so they also run to completion when actions take other times; only waiting changes.
// If for some message there is no such moment (the sender is computing whenever the receiver is
// free), the send goes to the sender's last point before the receiver needs it, where the sender
// will wait; colo's generators produce no such message, and simulate() decides the others. A
// schedule whose actions wait on each other in a circle across ranks (it deadlocks however
// messages are sent) is lowered with each send right after its producer and each receive right
// before its consumer, so that simulate() can say where it blocks.
//
// Why reference costs rather than measured ones: placing by the moments of a run with uneven
// costs loses the lock-step structure where those moments do not line up, and then stalls more
// than the reference placement does under the same uneven costs (measured: interleaved schedules
// with B = 2.2 F ran up to 29 % longer).
//
// Matching. NCCL ignores tags: between two ranks A -> B, the k-th message A sends is the k-th
// message B receives from A. A send and its receive share their moment of the paper run, and both
// ranks order their operations by it, so both see the messages between them in the same order
// (even where a stage runs microbatches in another order than its neighbour). simulate() checks
// the identity of every matched pair.
//
// Validates `schedule` first (validate()); throws ScheduleError if it is invalid.
std::vector<RankProgram> lower(const Schedule& schedule);

}  // namespace colo::pipeline
