#pragma once

#include <ostream>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace colo::pipeline {

// What a pipeline stage computes for one microbatch. Text forms F, B, W.
//   kForward   F: the stage's forward pass.
//   kBackward  B: in a schedule without W actions, the whole backward pass (input and weight
//              gradients); in a schedule that splits the backward (zero bubble), the input gradient
//              only, which is what the previous stage waits for.
//   kWeight    W: the weight gradient of the same (stage, microbatch) as an earlier B. It needs
//              nothing from other stages, so a schedule can defer it to fill idle time.
enum class ActionKind { kForward, kBackward, kWeight };

// 'F', 'B' or 'W'.
char to_char(ActionKind kind);

// One unit of compute in a schedule: `stage` runs `kind` on `microbatch`.
//
// `stage` is the VIRTUAL stage. With `chunks` model chunks per pipeline rank (interleaved
// schedules), chunk c of pp rank r holds virtual stage c * pp + r, so rank = stage % pp and
// chunk = stage / pp; with one chunk per rank, stage = rank.
//
// Text form "<stage><kind><microbatch>": "1F3" is stage 1's forward of microbatch 3, "0B2",
// "2W0".
struct Action {
  int stage = 0;
  ActionKind kind = ActionKind::kForward;
  int microbatch = 0;

  std::string str() const;
  // The reverse of str(). Surrounding whitespace is ignored; anything else that is not
  // <digits><F|B|W><digits> throws std::invalid_argument naming the text and the expected form.
  static Action parse(std::string_view text);

  friend bool operator==(const Action& a, const Action& b) {
    return a.stage == b.stage && a.kind == b.kind && a.microbatch == b.microbatch;
  }
  friend bool operator!=(const Action& a, const Action& b) { return !(a == b); }
  // Lexicographic by (stage, microbatch, kind), so that Action can key ordered containers.
  friend bool operator<(const Action& a, const Action& b) {
    return std::make_tuple(a.stage, a.microbatch, a.kind) < std::make_tuple(b.stage, b.microbatch, b.kind);
  }
};

std::ostream& operator<<(std::ostream& os, const Action& action);

// "0F0 0F1 0B0 0B1": the actions' text forms separated by single spaces.
std::string format_actions(const std::vector<Action>& actions);
// The reverse of format_actions(): actions separated by spaces, commas or both ("0F0, 0F1 0B0").
// Throws std::invalid_argument for the first action that does not parse, naming its position.
std::vector<Action> parse_actions(std::string_view text);

}  // namespace colo::pipeline
