#pragma once

#include <vector>

namespace colo::pipeline {

// Which virtual stages a pp rank holds and who its neighbours are. Pure arithmetic: no process
// group, so the same object serves the schedule, the interpreter and the tests.
//
// With `chunks` model chunks per rank there are V = pp_size * chunks virtual stages; chunk c of
// rank r holds virtual stage c * pp_size + r (Megatron's interleaved layout), so consecutive
// stages always sit on consecutive ranks, the last rank's chunk c feeding rank 0's chunk c + 1.
class StageManager {
 public:
  // Throws std::invalid_argument for pp_size or chunks below 1, pp_rank outside [0, pp_size),
  // or chunks above 1 with pp_size 1 (consecutive stages would share the rank).
  StageManager(int pp_size, int pp_rank, int chunks = 1);

  int pp_size() const { return pp_size_; }
  int pp_rank() const { return pp_rank_; }
  int chunks() const { return chunks_; }
  // V = pp_size * chunks.
  int num_stages() const { return pp_size_ * chunks_; }

  // This rank's virtual stage for `chunk`: chunk * pp_size + pp_rank.
  int stage(int chunk) const;
  // This rank's virtual stages, in chunk order.
  std::vector<int> stages() const;
  // Whether this rank's `chunk` holds the first (0) or last (V - 1) virtual stage: the one that
  // reads the input, or the one that computes the loss.
  bool is_first_stage(int chunk = 0) const { return stage(chunk) == 0; }
  bool is_last_stage(int chunk) const { return stage(chunk) == num_stages() - 1; }
  // The same for this rank's last chunk (its only one without interleaving).
  bool is_last_stage() const { return is_last_stage(chunks_ - 1); }

  // Which rank holds `stage`, and as which of its chunks.
  int rank_of(int stage) const;
  int chunk_of(int stage) const;
  // The pp rank holding stage - 1 (which sends `stage` its activations), and the one holding
  // stage + 1 (which sends it gradients). Throw std::invalid_argument for the first stage's
  // previous and the last stage's next.
  int prev_rank(int stage) const;
  int next_rank(int stage) const;

 private:
  void check_stage(int stage) const;
  void check_chunk(int chunk) const;

  int pp_size_;
  int pp_rank_;
  int chunks_;
};

}  // namespace colo::pipeline
