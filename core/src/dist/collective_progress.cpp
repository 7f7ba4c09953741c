#include "collective_progress.h"

#include <fmt/format.h>

#include <algorithm>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace colo::dist {

struct CollectiveProgress::Shared {
  c10::intrusive_ptr<c10d::Store> store;
  std::string key_prefix;
  int rank = 0;
  std::vector<int> global_ranks;

  std::mutex mutex;
  std::optional<std::string> unwritten;  // the newest record, not yet handed to the store
  bool writer_running = false;

  std::string key(int member) const { return fmt::format("{}/colo_progress/{}", key_prefix, member); }

  // Hands records to the store until none is left. A store that fails (gone, or stuck beyond its
  // own timeout) loses the record: the collective's own timeout still ends the wait.
  void write_until_done() {
    for (;;) {
      std::string record;
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (!unwritten) {
          writer_running = false;
          return;
        }
        record = std::move(*unwritten);
        unwritten.reset();
      }
      try {
        store->set(key(rank), std::vector<uint8_t>(record.begin(), record.end()));
      } catch (...) {
      }
    }
  }
};

namespace {

struct Record {
  uint64_t seq = 0;
  std::string op;
};

// "<seq> <op>", as record_waiting writes it.
std::optional<Record> parse_record(const std::string& text) {
  const std::size_t space = text.find(' ');
  if (space == std::string::npos || space == 0) return std::nullopt;
  try {
    return Record{std::stoull(text.substr(0, space)), text.substr(space + 1)};
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string join(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

}  // namespace

CollectiveProgress::CollectiveProgress(c10::intrusive_ptr<c10d::Store> store, std::string key_prefix, int rank,
                                       std::vector<int> global_ranks)
    : shared_(std::make_shared<Shared>()) {
  shared_->store = std::move(store);
  shared_->key_prefix = std::move(key_prefix);
  shared_->rank = rank;
  shared_->global_ranks = std::move(global_ranks);
}

std::chrono::milliseconds CollectiveProgress::slow_wait(std::chrono::milliseconds timeout) {
  return std::max(std::chrono::milliseconds(1), timeout / 10);
}

void CollectiveProgress::record_waiting(uint64_t seq, const std::string& op) {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  shared_->unwritten = fmt::format("{} {}", seq, op);
  if (shared_->writer_running) return;  // it picks the newest record up next
  try {
    std::thread([shared = shared_] { shared->write_until_done(); }).detach();
    shared_->writer_running = true;
  } catch (const std::exception&) {
    // No thread to be had: the record is lost, and a timeout may name this rank as absent.
  }
}

std::string CollectiveProgress::describe_absent(uint64_t seq, const std::string& op,
                                                std::chrono::milliseconds limit) const {
  const int size = static_cast<int>(shared_->global_ranks.size());
  using Records = std::vector<std::optional<std::string>>;
  auto promise = std::make_shared<std::promise<Records>>();
  auto future = promise->get_future();
  try {
    std::thread([shared = shared_, promise, size] {
      try {
        Records records(static_cast<std::size_t>(size));
        for (int member = 0; member < size; ++member) {
          const std::string key = shared->key(member);
          if (member == shared->rank || !shared->store->check({key})) continue;
          const std::vector<uint8_t> bytes = shared->store->get(key);
          records[static_cast<std::size_t>(member)] = std::string(bytes.begin(), bytes.end());
        }
        promise->set_value(std::move(records));
      } catch (...) {
        promise->set_exception(std::current_exception());
      }
    }).detach();
  } catch (const std::exception& e) {
    return fmt::format("(Which members did not arrive is unknown: {}.)", e.what());
  }
  if (future.wait_for(limit) != std::future_status::ready) {
    return fmt::format(
        "(Which members did not arrive is unknown: the job's store did not answer within {} ms; it is served by "
        "global rank 0, which may be the one stuck.)",
        limit.count());
  }
  Records records;
  try {
    records = future.get();
  } catch (const std::exception& e) {
    return fmt::format("(Which members did not arrive is unknown: reading the job's store failed: {}.)", e.what());
  }

  std::vector<std::string> absent, ahead;
  bool never_seen = false;
  for (int member = 0; member < size; ++member) {
    if (member == shared_->rank) continue;
    const std::string who =
        fmt::format("rank {} (global {})", member, shared_->global_ranks[static_cast<std::size_t>(member)]);
    const auto& text = records[static_cast<std::size_t>(member)];
    const std::optional<Record> record = text ? parse_record(*text) : std::nullopt;
    if (!record) {
      absent.push_back(who + ", never seen waiting in this group");
      never_seen = true;
    } else if (record->seq == seq && record->op == op) {
      continue;  // arrived
    } else if (record->seq == seq) {
      absent.push_back(
          fmt::format("{}, waiting at {} #{} instead: the members called this group's collectives in "
                      "different orders",
                      who, record->op, record->seq));
    } else if (record->seq < seq) {
      absent.push_back(fmt::format("{}, last seen waiting at {} #{}", who, record->op, record->seq));
    } else {
      ahead.push_back(fmt::format("{}, waiting at {} #{}", who, record->op, record->seq));
    }
  }
  if (absent.empty() && ahead.empty()) {
    return fmt::format("Every other member was seen waiting in {} #{} too; one of them may have died in it.", op, seq);
  }
  std::string text;
  if (!absent.empty()) {
    text = fmt::format("Did not arrive at {} #{}: {}.", op, seq, join(absent, "; "));
    if (never_seen) {
      text +=
          " A member never seen waiting is stopped, dead, or busy outside this group's collectives (computing, or "
          "waiting in another group); its own log, or colo-run's report, says which.";
    }
  }
  if (!ahead.empty()) {
    text += fmt::format("{}Already past {} #{}: {}; this rank missed collectives they made.", text.empty() ? "" : " ",
                        op, seq, join(ahead, "; "));
  }
  return text;
}

}  // namespace colo::dist
