#include <colo/pipeline/program.h>
#include <fmt/format.h>

#include <stdexcept>

namespace colo::pipeline {

std::string Message::str() const {
  return fmt::format("{} {}->{} mb{}", kind == ActionKind::kForward ? "act" : "grad", from_stage, to_stage, microbatch);
}

std::string CommOp::str() const {
  return kind == CommKind::kSend ? fmt::format("send {} to {}", message.str(), peer)
                                 : fmt::format("recv {} from {}", message.str(), peer);
}

std::string Step::str() const {
  if (is_compute()) return action().str();
  std::string out;
  for (const auto& op : comm()) out += (out.empty() ? "{" : ", ") + op.str();
  return out + "}";
}

std::string RankProgram::str() const {
  std::string out = fmt::format("rank {} program, {} steps:\n", rank, steps.size());
  for (std::size_t i = 0; i < steps.size(); ++i) out += fmt::format("  {:>3}  {}\n", i, steps[i].str());
  return out;
}

std::vector<Message> inputs_of(const Action& action, int stages) {
  switch (action.kind) {
    case ActionKind::kForward:
      if (action.stage > 0) return {{ActionKind::kForward, action.stage - 1, action.stage, action.microbatch}};
      return {};
    case ActionKind::kBackward:
      if (action.stage < stages - 1) {
        return {{ActionKind::kBackward, action.stage + 1, action.stage, action.microbatch}};
      }
      return {};
    case ActionKind::kWeight:
      return {};
  }
  throw std::logic_error("inputs_of: unknown ActionKind");
}

std::vector<Message> outputs_of(const Action& action, int stages) {
  switch (action.kind) {
    case ActionKind::kForward:
      if (action.stage < stages - 1) {
        return {{ActionKind::kForward, action.stage, action.stage + 1, action.microbatch}};
      }
      return {};
    case ActionKind::kBackward:
      if (action.stage > 0) return {{ActionKind::kBackward, action.stage, action.stage - 1, action.microbatch}};
      return {};
    case ActionKind::kWeight:
      return {};
  }
  throw std::logic_error("outputs_of: unknown ActionKind");
}

}  // namespace colo::pipeline
