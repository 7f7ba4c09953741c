#pragma once

#include <colo/compat/torch_compat.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace colo::dist {

// Which member of a group listens at which socket address, so that a failure Gloo reports by
// address ("Connection closed by peer [127.0.0.1]:40123") names the member instead: without
// colo-run (torchrun, srun, mpirun) nothing else would tell the survivors of a killed rank which
// one it was.
//
// Gloo's pairs exchange their listening addresses through the store while the group's backend
// connects: each member publishes one address per peer under a key that ends in its rank. The
// store handed to the backend is wrapped (recording()) so that those values are kept as they
// pass; learn() then decodes them (a sockaddr at the start of each equal share of the value).
// Whatever does not look so is skipped: the names stay best effort, never an error of their own,
// and a backend that exchanges nothing so (NCCL) leaves the book empty.
class PeerAddresses {
 public:
  // `store`, wrapped so that what passes through it during the backend's creation is kept.
  c10::intrusive_ptr<c10d::Store> recording(c10::intrusive_ptr<c10d::Store> store);
  // Decodes what was kept, for a group of `size` members, and stops keeping more.
  void learn(int size);

  // The member listening at `host` and `port`, if known.
  std::optional<int> member_at(const std::string& host, int port) const;

  // `message` with each "[host]:port" that belongs to a member followed by " (rank r (global g))",
  // where g is global_ranks[r]; `first` (optional) receives the first member so named.
  std::string name_members(const std::string& message, const std::vector<int>& global_ranks,
                           std::optional<int>* first = nullptr) const;

 private:
  struct Recorded {
    std::mutex mutex;
    bool open = true;
    std::vector<std::pair<std::string, std::vector<uint8_t>>> values;
  };
  std::shared_ptr<Recorded> recorded_ = std::make_shared<Recorded>();
  std::vector<std::pair<std::pair<std::string, int>, int>> book_;  // ((host, port), member)
};

}  // namespace colo::dist
