#include "peer_addresses.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cctype>
#include <cstring>

namespace colo::dist {
namespace {

// Forwards everything to the store it wraps, keeping what is set and got while recording.
class RecordingStore final : public compat::CloneableStore<> {
 public:
  using Recorded = std::pair<std::string, std::vector<uint8_t>>;
  RecordingStore(c10::intrusive_ptr<c10d::Store> inner, std::function<void(const Recorded&)> keep)
      : inner_(std::move(inner)), keep_(std::move(keep)) {
    timeout_ = inner_->getTimeout();
  }

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    inner_->set(key, value);
    keep_({key, value});
  }
  std::vector<uint8_t> get(const std::string& key) override {
    std::vector<uint8_t> value = inner_->get(key);
    keep_({key, value});
    return value;
  }
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override {
    return inner_->compareSet(key, expected, desired);
  }
  int64_t add(const std::string& key, int64_t value) override { return inner_->add(key, value); }
  bool deleteKey(const std::string& key) override { return inner_->deleteKey(key); }
  bool check(const std::vector<std::string>& keys) override { return inner_->check(keys); }
  int64_t getNumKeys() override { return inner_->getNumKeys(); }
  void wait(const std::vector<std::string>& keys) override { inner_->wait(keys); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    inner_->wait(keys, timeout);
  }
  const std::chrono::milliseconds& getTimeout() const noexcept override { return inner_->getTimeout(); }
  void setTimeout(const std::chrono::milliseconds& timeout) override {
    inner_->setTimeout(timeout);
    timeout_ = timeout;
  }

 private:
  c10::intrusive_ptr<c10d::Store> clone_store() override {
    return c10::make_intrusive<RecordingStore>(compat::clone_of(inner_), keep_);
  }

  c10::intrusive_ptr<c10d::Store> inner_;
  std::function<void(const Recorded&)> keep_;
};

// The rank a key ends in ("0/1", "rank_3"), if it ends in digits.
std::optional<int> trailing_rank(const std::string& key) {
  std::size_t start = key.size();
  while (start > 0 && std::isdigit(static_cast<unsigned char>(key[start - 1]))) --start;
  if (start == key.size() || key.size() - start > 9) return std::nullopt;
  return std::stoi(key.substr(start));
}

// A sockaddr at the start of `bytes`, as host and port (both byte orders of the port: Gloo has
// printed the raw network-order value in some versions).
std::optional<std::pair<std::string, int>> decode_address(const uint8_t* bytes, std::size_t size) {
  if (size < sizeof(sockaddr_storage)) return std::nullopt;
  sockaddr_storage ss{};
  std::memcpy(&ss, bytes, sizeof ss);
  char host[INET6_ADDRSTRLEN] = {};
  int port = 0;
  if (ss.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&ss);
    if (::inet_ntop(AF_INET, &in->sin_addr, host, sizeof host) == nullptr) return std::nullopt;
    port = ntohs(in->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host) == nullptr) return std::nullopt;
    port = ntohs(in6->sin6_port);
  } else {
    return std::nullopt;
  }
  if (port == 0) return std::nullopt;
  return std::make_pair(std::string(host), port);
}

int swapped(int port) { return ((port & 0xff) << 8) | ((port >> 8) & 0xff); }

}  // namespace

c10::intrusive_ptr<c10d::Store> PeerAddresses::recording(c10::intrusive_ptr<c10d::Store> store) {
  std::weak_ptr<Recorded> into = recorded_;
  return c10::make_intrusive<RecordingStore>(std::move(store), [into](const RecordingStore::Recorded& value) {
    const auto recorded = into.lock();
    if (!recorded) return;
    std::lock_guard<std::mutex> lock(recorded->mutex);
    if (recorded->open) recorded->values.push_back(value);
  });
}

void PeerAddresses::learn(int size) {
  std::vector<std::pair<std::string, std::vector<uint8_t>>> values;
  {
    std::lock_guard<std::mutex> lock(recorded_->mutex);
    recorded_->open = false;
    values.swap(recorded_->values);
  }
  if (size < 2) return;
  for (const auto& [key, value] : values) {
    const std::optional<int> member = trailing_rank(key);
    if (!member || *member >= size || value.empty() || value.size() % static_cast<std::size_t>(size - 1) != 0) {
      continue;
    }
    const std::size_t share = value.size() / static_cast<std::size_t>(size - 1);
    for (std::size_t offset = 0; offset + share <= value.size(); offset += share) {
      if (auto address = decode_address(value.data() + offset, share)) book_.push_back({*address, *member});
    }
  }
}

std::optional<int> PeerAddresses::member_at(const std::string& host, int port) const {
  for (const auto& [address, member] : book_) {
    if (address.first == host && (address.second == port || swapped(address.second) == port)) return member;
  }
  return std::nullopt;
}

std::string PeerAddresses::name_members(const std::string& message, const std::vector<int>& global_ranks,
                                        std::optional<int>* first) const {
  // Every "]:<digits>" closes an address whose '[' is the last one before it (Gloo's messages
  // start with "[file.cc:123] ", a bracket that is no address).
  std::string named;
  std::size_t copied = 0;
  for (std::size_t close = message.find("]:"); close != std::string::npos; close = message.find("]:", close + 2)) {
    const std::size_t open = message.rfind('[', close);
    std::size_t end = close + 2;
    while (end < message.size() && std::isdigit(static_cast<unsigned char>(message[end]))) ++end;
    if (open == std::string::npos || open < copied || end == close + 2 || end - close - 2 > 5) continue;
    const std::string host = message.substr(open + 1, close - open - 1);
    const std::optional<int> member = member_at(host, std::stoi(message.substr(close + 2, end - close - 2)));
    if (!member || *member >= static_cast<int>(global_ranks.size())) continue;
    named.append(message, copied, end - copied);
    named += fmt::format(" (rank {} (global {}))", *member, global_ranks[static_cast<std::size_t>(*member)]);
    copied = end;
    if (first != nullptr && !*first) *first = *member;
  }
  named.append(message, copied, std::string::npos);
  return named;
}

}  // namespace colo::dist
