#pragma once

#include <colo/compat/torch_compat.h>

#include <string>
#include <vector>

namespace colo::dist {

// The job's store as its ranks see it when the job has a token (COLO_JOB_TOKEN): every value a
// rank writes carries an HMAC-SHA256 of the key and the value under the token, and every value a
// rank reads must carry a valid one, or the read fails with a DistError that names the key and
// says a process outside the job wrote it. So whatever c10d, Gloo, NCCL or colo read from the
// store (rendezvous, the peers' addresses, progress records, checkpoint coordination) was written
// by a holder of the token: a process without it can neither join nor feed the job a value.
//
// What it does not do: hide the values (they are signed, not encrypted: anyone who reaches the
// store can read them), stop anyone from connecting to the store or from overwriting or deleting
// keys (the job then fails, saying so, rather than going on with a stranger's value), or sign
// counters (add(): c10d keeps them as numbers; reading one with get() is refused).
class SignedStore final : public compat::CloneableStore<> {
 public:
  SignedStore(c10::intrusive_ptr<c10d::Store> inner, std::string token);

  // What a value looks like in the store, and back. open() tells a value without a signature
  // from one signed with another token.
  enum class Seal { kValid, kUnsigned, kOtherToken };
  static std::vector<uint8_t> seal(const std::string& token, const std::string& key, const std::vector<uint8_t>& value);
  static Seal open(const std::string& token, const std::string& key, const std::vector<uint8_t>& stored,
                   std::vector<uint8_t>* value);
  // Whether `stored` carries a signature at all (a process without a token finds out that the
  // job has one).
  static bool is_sealed(const std::vector<uint8_t>& stored);
  // The value part of `stored`, signature unchecked (for a log line about a refused value).
  static std::vector<uint8_t> unverified_value(const std::vector<uint8_t>& stored);

  const c10::intrusive_ptr<c10d::Store>& inner() const { return inner_; }

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;
  const std::chrono::milliseconds& getTimeout() const noexcept override;
  void setTimeout(const std::chrono::milliseconds& timeout) override;

 private:
  c10::intrusive_ptr<c10d::Store> clone_store() override;
  std::vector<uint8_t> opened(const std::string& key, const std::vector<uint8_t>& stored) const;

  c10::intrusive_ptr<c10d::Store> inner_;
  std::string token_;
};

}  // namespace colo::dist
