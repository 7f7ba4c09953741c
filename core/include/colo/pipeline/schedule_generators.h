#pragma once

#include <colo/pipeline/schedule.h>

#include <string>
#include <vector>

namespace colo::pipeline {

// Schedule generators: pure functions of the shape (pp, microbatches, chunks); the
// ScheduleRegistry (schedule_registry.h) names them. Each throws std::invalid_argument listing
// every rule of its own the shape breaks. Below, r is the pp rank and m the number of microbatches.
// Every generator runs the microbatches of one kind on one stage in increasing order (F0 before
// F1, B0 before B1, W0 before W1), and every generated schedule runs its lowered programs
// (program.h) without a stall under the reference costs (the unit tests check each one).

// GPipe: every forward, then every backward (microbatch order). Simple, and each rank holds the
// activations of all m microbatches at the peak. With pp = 1 there is no pipeline to fill, so
// holding every activation would buy nothing: the schedule is then F0 B0 F1 B1 ...
Schedule gpipe_schedule(const ScheduleShape& shape);

// 1F1B (PipeDream-Flush, Megatron's non-interleaved schedule): rank r runs min(pp - r - 1, m)
// warm-up forwards, then alternates one forward and one backward, then runs the backwards left
// (cool-down). Same bubble as GPipe, but rank r holds at most min(pp - r, m) microbatches'
// activations. pp = 1 gives F0 B0 F1 B1 ...
Schedule one_f_one_b_schedule(const ScheduleShape& shape);

// Interleaved 1F1B (Narayanan et al. 2021, Megatron-LM's order): each rank holds `chunks` model
// chunks (virtual stages r, r + pp, ...), which divides the bubble by `chunks` at the cost of
// `chunks` times the point-to-point messages. Rank r runs "virtual microbatches" k = 0 ..
// chunks * m - 1: forward k is chunk (k mod (pp * chunks)) / pp of microbatch
// (k / (pp * chunks)) * pp + k mod pp, i.e. microbatches go through the chunks in groups of pp;
// backward k walks the chunks in reverse. Rank r runs
//   warm-up:  min(pp - r - 1 + (chunks - 1) * pp, chunks * m) forwards
//   steady:   forward k + warm-up, backward k, alternately
//   cool-down: the backwards left.
// The warm-up is one forward per hop shorter than Megatron's (pp - r - 1) * 2 + (chunks - 1) * pp.
// Megatron sends a forward's output only after the backward that follows it and needs the extra
// forwards to cover that delay; lower() sends as soon as sender and receiver are both between
// computes. With Megatron's count some messages have no such moment (their sender is computing
// whenever the receiver is free), and under rendezvous communication those stalls add up (see
// the unit tests); with this count there is always one, the bubble is exactly
// (pp - 1) / (chunks * m + pp - 1), and rank r holds at most chunks * pp - r chunks' activations
// (rank 0: pp stages' worth, as in 1F1B; Megatron's count holds pp - r - 1 more).
// Needs pp >= 2, chunks >= 2 and m a multiple of pp (interleaved_shape_problems()).
Schedule interleaved_schedule(const ScheduleShape& shape);
// The rules above that `shape` breaks, each saying what to change.
std::vector<std::string> interleaved_shape_problems(const ScheduleShape& shape);

// Zero bubble ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", the handcrafted
// schedule with 1F1B's memory): the backward is split into B (input gradient, which the previous
// stage waits for) and W (weight gradient, which nobody waits for). F and B run in 1F1B's order,
// so the input gradients travel back to rank 0 sooner than 1F1B's full backwards do; rank r's
// first r backwards (fewer when m is small) skip their W, later ones are each followed by the
// oldest pending W, and the W's still pending at the end fill the cool-down, where 1F1B leaves
// rank r idle. Rank r:
//   warm-up:  min(pp - r - 1, m) forwards
//   F B       (up to r times: W deferred)
//   F B W     (until the forwards are done)
//   B W       (the cool-down backwards)
//   W         (the deferred weight gradients)
// W runs in microbatch order, always after its B. Microbatches held (forwarded, B not run) are
// 1F1B's, min(pp - r, m); counting those that await their W too, no rank holds more than
// min(pp, m), 1F1B's peak. With F = B = W, each rank idles pp - 1 (m >= pp), a third of 1F1B's.
// (DeepSpeed's ZeroBubbleH1Pipeline with exact semantics has this order.)
Schedule zero_bubble_h1_schedule(const ScheduleShape& shape);

// Forwards only (evaluation), for any pp, chunks and m: rank r runs chunk 0's forwards of every
// microbatch in order, then chunk 1's, and so on; microbatches stream through the stages as in
// GPipe's first half. Nothing is held for a backward, so the order does not matter for memory.
Schedule forward_only_schedule(const ScheduleShape& shape);

}  // namespace colo::pipeline
