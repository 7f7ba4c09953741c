#include "admission.h"

#include "signed_store.h"

#include <colo/dist/errors.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <thread>

namespace colo::dist {
namespace {

std::string attempts_key(int rank) { return fmt::format("colo/join/{}/attempts", rank); }
std::string attempt_key(int rank, int64_t number) { return fmt::format("colo/join/{}/{}", rank, number); }

std::string this_process() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return fmt::format("pid {} on {}", ::getpid(), host[0] != '\0' ? host : "an unnamed host");
}

// What an attempt says of itself, made safe to print: it may come from anyone.
std::string printable(const std::vector<uint8_t>& bytes) {
  std::string text;
  for (uint8_t c : bytes) {
    if (text.size() >= 120) return text + "...";
    text += c >= ' ' && c < 0x7f ? static_cast<char>(c) : '?';
  }
  return text;
}

class CheckIn {
 public:
  CheckIn(c10d::Store& store, const Environment& env)
      : store_(store), env_(env), examined_(env.world_size, 0), admitted_(env.world_size, false) {}

  void join() {
    const int64_t number = store_.add(attempts_key(env_.rank), 1);
    const std::string key = attempt_key(env_.rank, number);
    const std::string words = this_process();
    const std::vector<uint8_t> said(words.begin(), words.end());
    store_.set(key, env_.job_token.empty() ? said : SignedStore::seal(env_.job_token, key, said));
  }

  // Reads the attempts not read yet; true once every rank is admitted.
  bool poll() {
    for (int rank = 0; rank < env_.world_size; ++rank) {
      if (admitted_[rank]) continue;
      const int64_t made = store_.add(attempts_key(rank), 0);
      while (!admitted_[rank] && examined_[rank] < made) {
        const std::string key = attempt_key(rank, examined_[rank] + 1);
        if (!store_.check({key})) break;  // counted, not written yet
        ++examined_[rank];
        judge(rank, key, store_.get(key));
      }
    }
    return std::all_of(admitted_.begin(), admitted_.end(), [](bool a) { return a; });
  }

  [[noreturn]] void time_out(std::chrono::milliseconds timeout) const {
    std::vector<int> missing;
    for (int rank = 0; rank < env_.world_size; ++rank) {
      if (!admitted_[rank]) missing.push_back(rank);
    }
    std::string refusals;
    if (refused_ > 0) {
      refusals = fmt::format(
          "; {} attempt(s) to join without this job token were refused ({} with another token): is COLO_JOB_TOKEN "
          "the same for every node?",
          refused_, refused_other_token_);
    }
    throw DistError(fmt::format("rank {}: rendezvous timed out after {} ms: rank(s) {} never arrived (world size {}){}",
                                env_.rank, timeout.count(), fmt::join(missing, ","), env_.world_size, refusals));
  }

 private:
  void judge(int rank, const std::string& key, const std::vector<uint8_t>& stored) {
    if (env_.job_token.empty()) {
      if (SignedStore::is_sealed(stored)) {
        throw DistError(fmt::format(
            "rank {}: this job admits only processes that hold its job token (COLO_JOB_TOKEN), and this one has "
            "none: it was not admitted. colo-run gives its ranks the token; a node of a job of several is started "
            "with the token in COLO_JOB_TOKEN (node 0's colo-run prints the one it made)",
            env_.rank));
      }
      admitted_[rank] = true;
      return;
    }
    std::vector<uint8_t> said;
    const SignedStore::Seal seal = SignedStore::open(env_.job_token, key, stored, &said);
    if (seal == SignedStore::Seal::kValid) {
      admitted_[rank] = true;
      return;
    }
    ++refused_;
    if (seal == SignedStore::Seal::kOtherToken) ++refused_other_token_;
    if (env_.rank == 0) {
      const std::string line = fmt::format(
          "colo: rank 0: refused a process that asked to join this job as rank {}: {}; it said it is {}. Only "
          "processes that hold the job token (COLO_JOB_TOKEN) are admitted\n",
          rank, seal == SignedStore::Seal::kUnsigned ? "it has no job token" : "its job token is not this job's",
          printable(SignedStore::unverified_value(stored)));
      std::fwrite(line.data(), 1, line.size(), stderr);
      std::fflush(stderr);
    }
  }

  c10d::Store& store_;
  const Environment& env_;
  std::vector<int64_t> examined_;
  std::vector<bool> admitted_;
  int refused_ = 0;
  int refused_other_token_ = 0;
};

}  // namespace

void admit_ranks(c10d::Store& store, const Environment& env, std::chrono::milliseconds timeout) {
  CheckIn check_in(store, env);
  check_in.join();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(5);
  while (!check_in.poll()) {
    if (std::chrono::steady_clock::now() > deadline) check_in.time_out(timeout);
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

}  // namespace colo::dist
