#include "signed_store.h"

#include "hmac_sha256.h"

#include <colo/dist/errors.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace colo::dist {
namespace {

// "colo-sig1" then the 32-byte HMAC, then the value.
constexpr char kMagic[] = "colo-sig1";
constexpr std::size_t kMagicSize = sizeof kMagic - 1;
constexpr std::size_t kHeaderSize = kMagicSize + 32;

Sha256Digest mac(const std::string& token, const std::string& key, const uint8_t* value, std::size_t size) {
  // The key is inside the MAC, so a signed value cannot be replayed under another key.
  std::string message = "colo store value\n" + key;
  message += '\0';
  message.append(reinterpret_cast<const char*>(value), size);
  return hmac_sha256(token, message);
}

}  // namespace

SignedStore::SignedStore(c10::intrusive_ptr<c10d::Store> inner, std::string token)
    : inner_(std::move(inner)), token_(std::move(token)) {
  timeout_ = inner_->getTimeout();
}

std::vector<uint8_t> SignedStore::seal(const std::string& token, const std::string& key,
                                       const std::vector<uint8_t>& value) {
  const Sha256Digest digest = mac(token, key, value.data(), value.size());
  std::vector<uint8_t> stored(kHeaderSize + value.size());
  std::memcpy(stored.data(), kMagic, kMagicSize);
  std::memcpy(stored.data() + kMagicSize, digest.data(), digest.size());
  if (!value.empty()) std::memcpy(stored.data() + kHeaderSize, value.data(), value.size());
  return stored;
}

bool SignedStore::is_sealed(const std::vector<uint8_t>& stored) {
  return stored.size() >= kMagicSize && std::memcmp(stored.data(), kMagic, kMagicSize) == 0;
}

std::vector<uint8_t> SignedStore::unverified_value(const std::vector<uint8_t>& stored) {
  if (!is_sealed(stored)) return stored;
  return std::vector<uint8_t>(stored.begin() + static_cast<std::ptrdiff_t>(std::min(stored.size(), kHeaderSize)),
                              stored.end());
}

SignedStore::Seal SignedStore::open(const std::string& token, const std::string& key,
                                    const std::vector<uint8_t>& stored, std::vector<uint8_t>* value) {
  if (!is_sealed(stored)) return Seal::kUnsigned;
  if (stored.size() < kHeaderSize) return Seal::kOtherToken;
  Sha256Digest carried{};
  std::copy(stored.begin() + kMagicSize, stored.begin() + kHeaderSize, carried.begin());
  const Sha256Digest expected = mac(token, key, stored.data() + kHeaderSize, stored.size() - kHeaderSize);
  if (!digests_equal(carried, expected)) return Seal::kOtherToken;
  if (value != nullptr) value->assign(stored.begin() + kHeaderSize, stored.end());
  return Seal::kValid;
}

std::vector<uint8_t> SignedStore::opened(const std::string& key, const std::vector<uint8_t>& stored) const {
  std::vector<uint8_t> value;
  const Seal seal = open(token_, key, stored, &value);
  if (seal == Seal::kValid) return value;
  throw DistError(fmt::format(
      "the job's store holds a value under key '{}' that no rank of this job wrote: {}. A process without the job "
      "token (COLO_JOB_TOKEN) reaches the store and wrote into it; colo refuses the value rather than act on it. "
      "Keep the store's address (MASTER_ADDR:MASTER_PORT) out of others' reach",
      key, seal == Seal::kUnsigned ? "it carries no signature" : "it is signed with another token"));
}

void SignedStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  inner_->set(key, seal(token_, key, value));
}

std::vector<uint8_t> SignedStore::compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                             const std::vector<uint8_t>& desired) {
  // An empty `expected` means "the key is absent", and stays empty. Signatures are deterministic,
  // so a sealed `expected` matches the sealed value stored.
  const std::vector<uint8_t> stored = inner_->compareSet(
      key, expected.empty() ? expected : seal(token_, key, expected), seal(token_, key, desired));
  return stored.empty() ? stored : opened(key, stored);
}

std::vector<uint8_t> SignedStore::get(const std::string& key) { return opened(key, inner_->get(key)); }

int64_t SignedStore::add(const std::string& key, int64_t value) { return inner_->add(key, value); }
bool SignedStore::deleteKey(const std::string& key) { return inner_->deleteKey(key); }
bool SignedStore::check(const std::vector<std::string>& keys) { return inner_->check(keys); }
int64_t SignedStore::getNumKeys() { return inner_->getNumKeys(); }
void SignedStore::wait(const std::vector<std::string>& keys) { inner_->wait(keys); }
void SignedStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  inner_->wait(keys, timeout);
}
const std::chrono::milliseconds& SignedStore::getTimeout() const noexcept { return inner_->getTimeout(); }
void SignedStore::setTimeout(const std::chrono::milliseconds& timeout) {
  inner_->setTimeout(timeout);
  timeout_ = timeout;
}

c10::intrusive_ptr<c10d::Store> SignedStore::clone_store() {
  return c10::make_intrusive<SignedStore>(compat::clone_of(inner_), token_);
}

}  // namespace colo::dist
