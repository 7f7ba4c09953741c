#include <colo/pipeline/schedule_format.h>
#include <colo/pipeline/simulator.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

namespace colo::pipeline {
namespace {

std::string ordinal(std::size_t k) {
  const std::size_t n = k + 1;
  const char* suffix = (n % 100 >= 11 && n % 100 <= 13) ? "th"
                       : n % 10 == 1                    ? "st"
                       : n % 10 == 2                    ? "nd"
                       : n % 10 == 3                    ? "rd"
                                                        : "th";
  return fmt::format("{}{}", n, suffix);
}

// Messages compare as keys of ordered containers.
auto key(const Message& m) { return std::make_tuple(static_cast<int>(m.kind), m.from_stage, m.to_stage, m.microbatch); }
struct MessageLess {
  bool operator()(const Message& a, const Message& b) const { return key(a) < key(b); }
};

// One communication operation in a program: step index, position in the batch.
struct OpRef {
  std::size_t step = 0;
  std::size_t op = 0;
};

[[noreturn]] void fail(const Schedule& schedule, const std::string& what, const std::vector<std::string>& problems) {
  throw ScheduleError(fmt::format("{} ({}):{}", what, describe(schedule.shape), list_problems(problems)));
}

// The checks that need no timing: the programs' shape, each operation's peer and message, and the
// data flow within each rank.
void check_programs(const Schedule& schedule, const std::vector<RankProgram>& programs) {
  std::vector<std::string> problems;
  if (programs.size() != schedule.actions.size()) {
    problems.push_back(fmt::format("there are {} programs for pp={} ranks", programs.size(), schedule.pp()));
    fail(schedule, "invalid pipeline programs", problems);
  }
  const int stages = schedule.num_stages();
  const int pp = schedule.pp();
  for (std::size_t rank = 0; rank < programs.size(); ++rank) {
    const RankProgram& program = programs[rank];
    if (program.rank != static_cast<int>(rank)) {
      problems.push_back(fmt::format("program {} says it is rank {}", rank, program.rank));
    }
    const auto& actions = schedule.actions[rank];
    std::size_t next_action = 0;
    std::set<Message, MessageLess> produced;  // by this rank's actions, not sent yet
    std::set<Message, MessageLess> received;
    for (std::size_t s = 0; s < program.steps.size(); ++s) {
      const Step& step = program.steps[s];
      const auto where = fmt::format("rank {} step {} ({})", rank, s, step.str());
      if (step.is_compute()) {
        const Action& action = step.action();
        if (next_action >= actions.size() || actions[next_action] != action) {
          problems.push_back(fmt::format("{}: the schedule's next action on rank {} is {}", where, rank,
                                         next_action < actions.size() ? actions[next_action].str() : "none"));
        } else if (step.action_index != next_action) {
          problems.push_back(fmt::format("{}: its action_index is {}, but it is action {} of the schedule", where,
                                         step.action_index, next_action));
        }
        ++next_action;
        for (const auto& input : inputs_of(action, stages)) {
          if (received.count(input) == 0) {
            problems.push_back(fmt::format("{}: needs {}, which the rank has not received", where, input.str()));
          }
        }
        for (const auto& output : outputs_of(action, stages)) produced.insert(output);
        continue;
      }
      if (step.action_index != next_action) {
        problems.push_back(fmt::format("{}: its action_index is {}, but the action that runs next is action {}", where,
                                       step.action_index, next_action));
      }
      for (const CommOp& op : step.comm()) {
        const Message& m = op.message;
        const int direction = m.kind == ActionKind::kForward ? 1 : -1;
        if (m.kind == ActionKind::kWeight || m.from_stage < 0 || m.from_stage >= stages || m.to_stage < 0 ||
            m.to_stage >= stages || m.to_stage != m.from_stage + direction || m.microbatch < 0 ||
            m.microbatch >= schedule.shape.microbatches()) {
          problems.push_back(fmt::format("{}: {} is not a message between neighbouring stages", where, op.str()));
          continue;
        }
        if (op.peer < 0 || op.peer >= pp || op.peer == static_cast<int>(rank)) {
          problems.push_back(fmt::format("{}: peer {} is not one of the other ranks in [0, {})", where, op.peer, pp));
          continue;
        }
        const bool send = op.kind == CommKind::kSend;
        const int own_stage = send ? m.from_stage : m.to_stage;
        const int peer_stage = send ? m.to_stage : m.from_stage;
        if (schedule.rank_of(own_stage) != static_cast<int>(rank) || schedule.rank_of(peer_stage) != op.peer) {
          problems.push_back(fmt::format("{}: {} must go from rank {} to rank {}", where, op.str(),
                                         schedule.rank_of(m.from_stage), schedule.rank_of(m.to_stage)));
          continue;
        }
        if (send) {
          if (produced.erase(m) == 0) {
            problems.push_back(
                fmt::format("{}: sends {} before the rank computes it, or a second time", where, m.str()));
          }
        } else if (!received.insert(m).second) {
          problems.push_back(fmt::format("{}: receives {} a second time", where, m.str()));
        }
      }
    }
    if (next_action != actions.size()) {
      problems.push_back(fmt::format("rank {}: the program computes {} of the schedule's {} actions (stops before {})",
                                     rank, next_action, actions.size(),
                                     next_action < actions.size() ? actions[next_action].str() : "the end"));
    }
    for (const auto& m : produced) {
      problems.push_back(fmt::format("rank {}: never sends {}, which it computes", rank, m.str()));
    }
  }
  if (!problems.empty()) fail(schedule, "invalid pipeline programs", problems);
}

// Runs the programs with rendezvous semantics (see simulate()).
class DryRun {
 public:
  DryRun(const Schedule& schedule, const std::vector<RankProgram>& programs, const ActionCosts& costs)
      : schedule_(schedule), programs_(programs), costs_(costs) {
    const std::size_t pp = programs.size();
    sends_.assign(pp, std::vector<std::vector<OpRef>>(pp));
    recvs_.assign(pp, std::vector<std::vector<OpRef>>(pp));
    ordinal_.resize(pp);
    for (std::size_t rank = 0; rank < pp; ++rank) {
      const auto& steps = programs[rank].steps;
      ordinal_[rank].resize(steps.size());
      for (std::size_t s = 0; s < steps.size(); ++s) {
        if (steps[s].is_compute()) continue;
        for (std::size_t j = 0; j < steps[s].comm().size(); ++j) {
          const CommOp& op = steps[s].comm()[j];
          auto& queue = (op.kind == CommKind::kSend ? sends_ : recvs_)[rank][op.peer];
          ordinal_[rank][s].push_back(queue.size());
          queue.push_back({s, j});
        }
      }
    }
    pc_.assign(pp, 0);
    ready_.assign(pp, 0.0);
    posted_.resize(pp);
    for (std::size_t rank = 0; rank < pp; ++rank) posted_[rank].assign(programs[rank].steps.size(), 0.0);
  }

  SimulationResult run() {
    const std::size_t pp = programs_.size();
    SimulationResult result;
    result.ranks.resize(pp);
    for (std::size_t rank = 0; rank < pp; ++rank) {
      result.ranks[rank].program = programs_[rank];
      result.ranks[rank].steps.resize(programs_[rank].steps.size());
      result.ranks[rank].actions.resize(schedule_.actions[rank].size());
    }
    for (bool progress = true; progress;) {
      progress = false;
      for (std::size_t rank = 0; rank < pp; ++rank) {
        while (advance(rank, result.ranks[rank])) progress = true;
      }
    }
    std::vector<std::size_t> blocked;
    for (std::size_t rank = 0; rank < pp; ++rank) {
      if (pc_[rank] < programs_[rank].steps.size()) blocked.push_back(rank);
    }
    if (!blocked.empty()) report_deadlock(blocked);

    for (std::size_t rank = 0; rank < pp; ++rank) {
      RankTimeline& timeline = result.ranks[rank];
      timeline.finish = ready_[rank];
      result.makespan = std::max(result.makespan, timeline.finish);
      // A microbatch's backward is complete after its B, or its W when the backward is split.
      const ActionKind completes = schedule_.split_backward ? ActionKind::kWeight : ActionKind::kBackward;
      int in_flight = 0;
      int unfinished = 0;
      for (const auto& action : schedule_.actions[rank]) {
        // A forward-only run keeps nothing for a backward.
        const int started = action.kind == ActionKind::kForward && !schedule_.forward_only ? 1 : 0;
        in_flight += started - (action.kind == ActionKind::kBackward ? 1 : 0);
        unfinished += started - (action.kind == completes ? 1 : 0);
        timeline.peak_in_flight = std::max(timeline.peak_in_flight, in_flight);
        timeline.peak_unfinished = std::max(timeline.peak_unfinished, unfinished);
      }
    }
    return result;
  }

 private:
  // Runs rank's current step if it can; false when the rank is done or blocked.
  bool advance(std::size_t rank, RankTimeline& timeline) {
    const auto& steps = programs_[rank].steps;
    const std::size_t s = pc_[rank];
    if (s == steps.size()) return false;
    const Step& step = steps[s];
    if (step.is_compute()) {
      const double cost = cost_of(step.action(), costs_, schedule_.split_backward, schedule_.shape.chunks());
      timeline.steps[s] = {ready_[rank], ready_[rank] + cost};
      timeline.actions[step.action_index] = timeline.steps[s];
      timeline.busy += cost;
      ready_[rank] += cost;
      ++pc_[rank];
      return true;
    }
    posted_[rank][s] = ready_[rank];
    double done = ready_[rank];
    for (std::size_t j = 0; j < step.comm().size(); ++j) {
      const OpRef& partner = partner_of(rank, s, j);
      if (pc_[step.comm()[j].peer] < partner.step) return false;  // not posted yet
      check_identity(rank, s, j, partner);
      done = std::max(done, posted_[step.comm()[j].peer][partner.step]);
    }
    timeline.steps[s] = {ready_[rank], done};
    ready_[rank] = done;
    ++pc_[rank];
    return true;
  }

  // Where the operation that matches rank's step s, operation j, is in its peer's program. It
  // exists: check_programs() has made every message sent once by its producer's rank and received
  // once by its consumer's, so each ordered pair of ranks has as many sends as receives.
  const OpRef& partner_of(std::size_t rank, std::size_t s, std::size_t j) const {
    const CommOp& op = programs_[rank].steps[s].comm()[j];
    return (op.kind == CommKind::kSend ? recvs_ : sends_)[op.peer][rank][ordinal_[rank][s][j]];
  }

  void check_identity(std::size_t rank, std::size_t s, std::size_t j, const OpRef& partner) const {
    const CommOp& op = programs_[rank].steps[s].comm()[j];
    const CommOp& other = programs_[op.peer].steps[partner.step].comm()[partner.op];
    if (op.message == other.message) return;
    const CommOp& send = op.kind == CommKind::kSend ? op : other;
    const CommOp& recv = op.kind == CommKind::kSend ? other : op;
    const int sender = op.kind == CommKind::kSend ? static_cast<int>(rank) : op.peer;
    const std::size_t send_step = op.kind == CommKind::kSend ? s : partner.step;
    const std::size_t recv_step = op.kind == CommKind::kSend ? partner.step : s;
    const std::size_t k = ordinal_[rank][s][j];
    fail(schedule_, "pipeline messages would be mismatched",
         {fmt::format("rank {}'s {} send to rank {} (step {}) carries {}, but rank {}'s {} receive from rank {} (step "
                      "{}) expects {}: messages between two ranks match in the order they are posted (NCCL ignores "
                      "tags), so the receiver would take microbatch {}'s data for microbatch {}'s. Make both ranks "
                      "exchange these messages in the same order.",
                      sender, ordinal(k), send.peer, send_step, send.message.str(), send.peer, ordinal(k), sender,
                      recv_step, recv.message.str(), send.message.microbatch, recv.message.microbatch)});
  }

  [[noreturn]] void report_deadlock(const std::vector<std::size_t>& blocked) const {
    std::vector<std::string> lines;
    std::map<int, std::size_t> marks;
    for (std::size_t rank : blocked) {
      const std::size_t s = pc_[rank];
      const Step& step = programs_[rank].steps[s];
      const auto& actions = schedule_.actions[rank];
      marks[static_cast<int>(rank)] = step.action_index;
      std::string waits;
      for (std::size_t j = 0; j < step.comm().size(); ++j) {
        const CommOp& op = step.comm()[j];
        const OpRef& partner = partner_of(rank, s, j);
        if (pc_[op.peer] >= partner.step) continue;  // matched
        const std::string why =
            fmt::format("rank {} to post its {} {} {} rank {} (its step {}), but it is at step {}", op.peer,
                        ordinal(ordinal_[rank][s][j]), op.kind == CommKind::kSend ? "receive" : "send",
                        op.kind == CommKind::kSend ? "from" : "to", rank, partner.step, pc_[op.peer]);
        waits += fmt::format("\n      {}: waits for {}", op.str(), why);
      }
      lines.push_back(fmt::format(
          "rank {} is blocked at step {} {}, before action {} ({}):{}", rank, s, step.str(), step.action_index,
          step.action_index < actions.size() ? actions[step.action_index].str() : "end", waits));
    }
    std::string list;
    for (const auto& line : lines) list += "\n  - " + line;
    throw ScheduleDeadlock(fmt::format(
        "pipeline deadlock ({}): no rank can make progress; every blocked rank waits in a communication batch "
        "for an operation its peer has not posted:{}\nthe schedule, with each blocked rank's next action "
        "marked:\n{}",
        describe(schedule_.shape), list, format_schedule_grid(schedule_, marks)), marks);
  }

  const Schedule& schedule_;
  const std::vector<RankProgram>& programs_;
  const ActionCosts& costs_;
  // sends_[a][b]: rank a's sends to rank b in program order; recvs_[b][a]: rank b's receives from a.
  std::vector<std::vector<std::vector<OpRef>>> sends_;
  std::vector<std::vector<std::vector<OpRef>>> recvs_;
  // ordinal_[rank][step][j]: how many operations of the same kind and peer precede that one.
  std::vector<std::vector<std::vector<std::size_t>>> ordinal_;
  std::vector<std::size_t> pc_;              // each rank's current step
  std::vector<double> ready_;                // when each rank reached its current step
  std::vector<std::vector<double>> posted_;  // when each rank posted each of its batches
};

}  // namespace

double SimulationResult::bubble_fraction() const {
  if (ranks.empty() || makespan <= 0) return 0.0;
  double busy = 0;
  for (const auto& rank : ranks) busy += rank.busy;
  return 1.0 - busy / (static_cast<double>(ranks.size()) * makespan);
}

SimulationResult simulate(const Schedule& schedule, const std::vector<RankProgram>& programs,
                          const ActionCosts& costs) {
  validate(schedule);
  check_costs(costs);
  if (!costs.per_stage().empty() && costs.per_stage().size() != static_cast<std::size_t>(schedule.num_stages())) {
    throw std::invalid_argument(fmt::format("ActionCosts: per_stage has {} entries for {} virtual stages ({})",
                                            costs.per_stage().size(), schedule.num_stages(), describe(schedule.shape)));
  }
  check_programs(schedule, programs);
  return DryRun(schedule, programs, costs).run();
}

SimulationResult simulate(const Schedule& schedule, const ActionCosts& costs) {
  return simulate(schedule, lower(schedule), costs);
}

std::string format_timeline(const SimulationResult& result, double slot) {
  if (!(slot > 0)) throw std::invalid_argument(fmt::format("format_timeline: slot must be > 0, got {}", slot));
  const auto columns = static_cast<std::size_t>(std::ceil(result.makespan / slot - 1e-9));
  std::vector<std::vector<std::string>> cells(result.ranks.size(), std::vector<std::string>(columns, "."));
  std::size_t width = 1;
  for (std::size_t r = 0; r < result.ranks.size(); ++r) {
    const RankTimeline& timeline = result.ranks[r];
    for (std::size_t s = 0; s < timeline.program.steps.size(); ++s) {
      const Step& step = timeline.program.steps[s];
      if (!step.is_compute()) continue;
      // A column shows the action running at its midpoint.
      for (std::size_t c = 0; c < columns; ++c) {
        const double mid = (static_cast<double>(c) + 0.5) * slot;
        if (timeline.steps[s].start <= mid && mid < timeline.steps[s].end) {
          cells[r][c] = step.action().str();
          width = std::max(width, cells[r][c].size());
        }
      }
    }
  }
  std::string out;
  for (std::size_t r = 0; r < cells.size(); ++r) {
    std::string line = fmt::format("rank {}:", r);
    for (const auto& cell : cells[r]) line += fmt::format(" {:<{}}", cell, width);
    line.erase(line.find_last_not_of(' ') + 1);
    out += line + '\n';
  }
  return out;
}

}  // namespace colo::pipeline
