#pragma once

#include <c10/util/intrusive_ptr.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace c10d {
class Store;
}

namespace colo::dist {

// Where the members of one group were last seen waiting, kept in the job's store, so that a rank
// whose collective timed out can name the members that never arrived and say where they were.
//
// Every member numbers the group's collectives alike (members call them in the same order), and
// a member that has arrived at collective #n waits in it. Only a wait that outlasts a tenth of the
// group's timeout is recorded ("waiting at #n, op"): a healthy collective ends far sooner, so the
// hot path makes no store round trip at all, and by the time a wait times out every member that
// arrived in its first nine tenths has recorded its arrival. A stopped or dead process can write
// nothing, and a member busy elsewhere (computing, or waiting in another group) has no reason to:
// both show as not arrived, which is what the message must say. A background heartbeat would
// also tell a live member from a stopped one, but costs a thread and a store write per interval
// in every process for the whole run; colo-run already names a rank that died.
//
// Records are written on a thread of their own and reads are bounded: the store is served by
// global rank 0 (or is a file), and rank 0 may be the process that is stuck.
class CollectiveProgress {
 public:
  // `key_prefix` is the group's own prefix in `store` (fresh for every group created), `rank` this
  // member's rank in the group, `global_ranks` the members' global ranks by group rank.
  CollectiveProgress(c10::intrusive_ptr<c10d::Store> store, std::string key_prefix, int rank,
                     std::vector<int> global_ranks);

  // The number of the collective being issued: 1, 2, ...
  uint64_t next() { return ++issued_; }

  // How long a wait lasts before it is recorded: a tenth of the timeout, at least 1 ms.
  static std::chrono::milliseconds slow_wait(std::chrono::milliseconds timeout);

  // Records that this rank is waiting in collective `seq` (`op`). Never blocks: the write happens
  // on a background thread, the newest record replacing one not yet written.
  void record_waiting(uint64_t seq, const std::string& op);

  // One or two sentences for an error message: the members that did not arrive at collective
  // `seq` (`op`) and where each was last seen waiting, from their records (read for at most
  // `limit`). Never throws.
  std::string describe_absent(uint64_t seq, const std::string& op, std::chrono::milliseconds limit) const;

 private:
  struct Shared;  // what the writing thread needs, kept alive by it after this object is gone
  std::shared_ptr<Shared> shared_;
  std::atomic<uint64_t> issued_{0};
};

}  // namespace colo::dist
