#include <colo/pipeline/stage_manager.h>
#include <fmt/format.h>

#include <stdexcept>

namespace colo::pipeline {

StageManager::StageManager(int pp_size, int pp_rank, int chunks)
    : pp_size_(pp_size), pp_rank_(pp_rank), chunks_(chunks) {
  if (pp_size < 1)
    throw std::invalid_argument(fmt::format("StageManager: pp_size must be at least 1, got {}", pp_size));
  if (pp_rank < 0 || pp_rank >= pp_size) {
    throw std::invalid_argument(fmt::format("StageManager: pp_rank {} is outside [0, {})", pp_rank, pp_size));
  }
  if (chunks < 1) throw std::invalid_argument(fmt::format("StageManager: chunks must be at least 1, got {}", chunks));
  if (chunks > 1 && pp_size == 1) {
    throw std::invalid_argument(fmt::format(
        "StageManager: chunks={} needs pp_size >= 2 (with one rank, consecutive stages would share it): use chunks=1",
        chunks));
  }
}

void StageManager::check_stage(int stage) const {
  if (stage < 0 || stage >= num_stages()) {
    throw std::invalid_argument(fmt::format("StageManager: stage {} is outside [0, {}) (pp_size {} × chunks {})", stage,
                                            num_stages(), pp_size_, chunks_));
  }
}

void StageManager::check_chunk(int chunk) const {
  if (chunk < 0 || chunk >= chunks_) {
    throw std::invalid_argument(fmt::format("StageManager: chunk {} is outside [0, {})", chunk, chunks_));
  }
}

int StageManager::stage(int chunk) const {
  check_chunk(chunk);
  return chunk * pp_size_ + pp_rank_;
}

std::vector<int> StageManager::stages() const {
  std::vector<int> out;
  for (int c = 0; c < chunks_; ++c) out.push_back(stage(c));
  return out;
}

int StageManager::rank_of(int stage) const {
  check_stage(stage);
  return stage % pp_size_;
}

int StageManager::chunk_of(int stage) const {
  check_stage(stage);
  return stage / pp_size_;
}

int StageManager::prev_rank(int stage) const {
  check_stage(stage);
  if (stage == 0) throw std::invalid_argument("StageManager: stage 0 is the first stage; it has no previous rank");
  return rank_of(stage - 1);
}

int StageManager::next_rank(int stage) const {
  check_stage(stage);
  if (stage == num_stages() - 1) {
    throw std::invalid_argument(
        fmt::format("StageManager: stage {} is the last stage; it has no next rank", num_stages() - 1));
  }
  return rank_of(stage + 1);
}

}  // namespace colo::pipeline
