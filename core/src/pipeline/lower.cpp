#include <colo/pipeline/action_costs.h>
#include <colo/pipeline/program.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <tuple>

namespace colo::pipeline {
namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

// When each action starts and ends if every rank runs its actions in order, each as soon as its
// inputs exist (sends buffered, communication free). None if some action never runs: the
// schedule's order across ranks is circular, so it deadlocks whatever the communication.
struct Timeline {
  std::vector<std::vector<double>> start;  // [rank][action]
  std::vector<std::vector<double>> end;
};

// Index of an action's (stage, microbatch, kind) in per-schedule tables.
std::size_t slot(const Schedule& schedule, int stage, ActionKind kind, int microbatch) {
  return (static_cast<std::size_t>(stage) * schedule.shape.microbatches() + microbatch) * 3 + static_cast<int>(kind);
}

std::optional<Timeline> reference_timeline(const Schedule& schedule) {
  const ActionCosts costs;  // the reference: F = 1, full B = 2, split B = W = 1
  const int stages = schedule.num_stages();
  const std::size_t ranks = schedule.actions.size();
  std::vector<double> done(static_cast<std::size_t>(stages) * schedule.shape.microbatches() * 3, kNever);
  Timeline timeline;
  timeline.start.resize(ranks);
  timeline.end.resize(ranks);
  std::vector<double> free(ranks, 0.0);
  for (bool progress = true; progress;) {
    progress = false;
    for (std::size_t rank = 0; rank < ranks; ++rank) {
      const auto& actions = schedule.actions[rank];
      while (timeline.end[rank].size() < actions.size()) {
        const Action& action = actions[timeline.end[rank].size()];
        double start = free[rank];
        for (const auto& input : inputs_of(action, stages)) {
          const ActionKind producer = input.kind;  // an activation comes from an F, a gradient from a B
          start = std::max(start, done[slot(schedule, input.from_stage, producer, input.microbatch)]);
        }
        if (start == kNever) break;
        const double end = start + cost_of(action, costs, schedule.split_backward, schedule.shape.chunks());
        timeline.start[rank].push_back(start);
        timeline.end[rank].push_back(end);
        done[slot(schedule, action.stage, action.kind, action.microbatch)] = end;
        free[rank] = end;
        progress = true;
      }
    }
  }
  for (std::size_t rank = 0; rank < ranks; ++rank) {
    if (timeline.end[rank].size() < schedule.actions[rank].size()) return std::nullopt;
  }
  return timeline;
}

// A communication operation placed at boundary `boundary` of its rank (boundary i comes before
// action i; the last one after the last action). `stamp` orders the operations of a rank; a send
// and its receive carry the same stamp, which keeps both ranks' orders of the messages between
// them equal.
struct PlacedOp {
  std::size_t boundary = 0;
  double stamp = 0;
  CommOp op;
};

auto order_key(const PlacedOp& p) {
  const Message& m = p.op.message;
  return std::make_tuple(p.boundary, p.stamp, static_cast<int>(p.op.kind), p.op.peer, static_cast<int>(m.kind),
                         m.from_stage, m.microbatch);
}

// A rank's boundary i spans [lo(i), hi(i)]: from the end of action i - 1 to the start of
// action i (the rank is idle in between, or the two touch).
struct Boundaries {
  const std::vector<double>& start;
  const std::vector<double>& end;
  double lo(std::size_t i) const { return i == 0 ? 0.0 : end[i - 1]; }
  double hi(std::size_t i) const { return i == start.size() ? kNever : start[i]; }
};

// Where the send of a message produced by `producer` on one rank and the receive before
// `consumer` on another go, and their common stamp.
struct Placement {
  std::size_t send_boundary;
  std::size_t recv_boundary;
  double stamp;
};

// The latest moment in [end of producer, start of consumer] at which both ranks are between
// computes in the reference timeline; both operations go to the boundaries holding that moment.
// Without one, the send goes to the sender's last boundary before the consumer starts (the
// sender will wait there for the receiver) and the receive right before the consumer.
Placement place(const Boundaries& sender, std::size_t producer, const Boundaries& receiver, std::size_t consumer,
                double tolerance) {
  const double produced = sender.end[producer];
  const double consumed = receiver.start[consumer];
  std::size_t last_send = producer + 1;
  while (last_send < sender.start.size() && sender.lo(last_send + 1) <= consumed + tolerance) ++last_send;

  // Scan both lists of boundaries backwards from the latest candidates.
  std::size_t a = last_send;
  std::size_t b = consumer;
  while (true) {
    const double hi_a = sender.hi(a);
    const double hi_b = receiver.hi(b);
    if (std::min(hi_a, hi_b) < produced - tolerance) break;  // everything earlier ends before the data exists
    if (sender.lo(a) > hi_b + tolerance) {
      if (a == producer + 1) break;
      --a;
    } else if (receiver.lo(b) > hi_a + tolerance) {
      if (b == 0) break;
      --b;
    } else {
      return {a, b, std::min({hi_a, hi_b, consumed})};
    }
  }
  return {last_send, consumer, consumed};
}

}  // namespace

std::vector<RankProgram> lower(const Schedule& schedule) {
  validate(schedule);
  const int stages = schedule.num_stages();
  const std::size_t ranks = schedule.actions.size();

  // Where each action is: (rank, position).
  std::vector<std::pair<int, std::size_t>> where(static_cast<std::size_t>(stages) * schedule.shape.microbatches() * 3);
  for (std::size_t rank = 0; rank < ranks; ++rank) {
    for (std::size_t i = 0; i < schedule.actions[rank].size(); ++i) {
      const Action& a = schedule.actions[rank][i];
      where[slot(schedule, a.stage, a.kind, a.microbatch)] = {static_cast<int>(rank), i};
    }
  }

  const auto timeline = reference_timeline(schedule);
  double horizon = 1.0;
  if (timeline) {
    for (const auto& ends : timeline->end) {
      if (!ends.empty()) horizon = std::max(horizon, ends.back());
    }
  }
  const double tolerance = 1e-9 * horizon;

  std::vector<std::vector<PlacedOp>> placed(ranks);
  for (std::size_t rank = 0; rank < ranks; ++rank) {
    for (std::size_t i = 0; i < schedule.actions[rank].size(); ++i) {
      for (const auto& message : outputs_of(schedule.actions[rank][i], stages)) {
        const ActionKind consumer_kind = message.kind;  // an activation feeds an F, a gradient a B
        const auto [to_rank, consumer] = where[slot(schedule, message.to_stage, consumer_kind, message.microbatch)];
        // A circular schedule deadlocks anyway (simulate() says where): right after the producer,
        // right before the consumer, in program order.
        Placement p{i + 1, consumer, static_cast<double>(i)};
        if (timeline) {
          p = place({timeline->start[rank], timeline->end[rank]}, i, {timeline->start[to_rank], timeline->end[to_rank]},
                    consumer, tolerance);
        }
        placed[rank].push_back({p.send_boundary, p.stamp, {CommKind::kSend, to_rank, message}});
        placed[to_rank].push_back({p.recv_boundary, p.stamp, {CommKind::kRecv, static_cast<int>(rank), message}});
      }
    }
  }

  std::vector<RankProgram> programs(ranks);
  for (std::size_t rank = 0; rank < ranks; ++rank) {
    auto& ops = placed[rank];
    std::sort(ops.begin(), ops.end(), [](const PlacedOp& x, const PlacedOp& y) { return order_key(x) < order_key(y); });
    RankProgram& program = programs[rank];
    program.rank = static_cast<int>(rank);
    const auto& actions = schedule.actions[rank];
    auto next = ops.begin();
    for (std::size_t boundary = 0; boundary <= actions.size(); ++boundary) {
      CommBatch batch;
      for (; next != ops.end() && next->boundary == boundary; ++next) batch.ops.push_back(next->op);
      if (!batch.ops.empty()) program.steps.push_back({std::move(batch), boundary});
      if (boundary < actions.size()) program.steps.push_back({actions[boundary], boundary});
    }
  }
  return programs;
}

}  // namespace colo::pipeline
