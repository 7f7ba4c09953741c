// The job token's machinery inside a rank: HMAC-SHA256 (against the published vectors) and the
// SignedStore that signs every value a rank writes into the job's store and refuses every value
// no holder of the token wrote. (Admission of whole processes: dist_job_test.cpp.)
#include <colo/dist/environment.h>
#include <colo/dist/errors.h>
#include <colo/dist/process_group.h>

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>

#include <string>
#include <vector>

#include "error_of.h"
#include "hmac_sha256.h"
#include "signed_store.h"
#include "temporary_directory.h"

namespace colo::dist {
namespace {

using testing::error_of;

std::vector<uint8_t> bytes(const std::string& text) { return std::vector<uint8_t>(text.begin(), text.end()); }

TEST(JobToken, Sha256AndHmacMatchThePublishedVectors) {
  // FIPS 180-4 examples.
  EXPECT_EQ(to_hex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(to_hex(sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(to_hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(to_hex(sha256(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // Padding boundaries: 55 bytes fit one block with the length, 56 need two; 64 is a whole block.
  EXPECT_EQ(to_hex(sha256(std::string(55, 'a'))), "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(to_hex(sha256(std::string(56, 'a'))), "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(to_hex(sha256(std::string(64, 'a'))), "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
  // RFC 4231, test cases 1, 2 and 6 (a key longer than a block).
  EXPECT_EQ(to_hex(hmac_sha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(to_hex(hmac_sha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(to_hex(hmac_sha256(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

class SignedStoreTest : public ::testing::Test {
 protected:
  SignedStoreTest()
      : raw_(c10::make_intrusive<c10d::FileStore>(dir_.file("store"), 1)),
        store_(c10::make_intrusive<SignedStore>(raw_, token_)) {
    raw_->setTimeout(std::chrono::seconds(5));
  }
  testing::TemporaryDirectory dir_;
  const std::string token_ = std::string(64, '7');
  c10::intrusive_ptr<c10d::FileStore> raw_;
  c10::intrusive_ptr<SignedStore> store_;
};

TEST_F(SignedStoreTest, WhatARankWritesItReadsBack) {
  store_->set("colo/a", bytes("value of a"));
  EXPECT_EQ(store_->get("colo/a"), bytes("value of a"));
  const std::vector<uint8_t> stored = raw_->get("colo/a");
  EXPECT_TRUE(SignedStore::is_sealed(stored));
  EXPECT_NE(stored, bytes("value of a"));
  // compareSet: absent -> set; a matching expected value -> replaced; a stale one -> the current.
  EXPECT_EQ(store_->compareSet("colo/c", {}, bytes("one")), bytes("one"));
  EXPECT_EQ(store_->compareSet("colo/c", bytes("one"), bytes("two")), bytes("two"));
  EXPECT_EQ(store_->compareSet("colo/c", bytes("one"), bytes("three")), bytes("two"));
  EXPECT_EQ(store_->get("colo/c"), bytes("two"));
  // Counters are c10d's numbers, unsigned.
  EXPECT_EQ(store_->add("colo/n", 2), 2);
  EXPECT_EQ(store_->add("colo/n", 3), 5);
  EXPECT_TRUE(store_->check({"colo/a", "colo/n"}));
}

TEST_F(SignedStoreTest, AValueNoHolderOfTheTokenWroteIsRefused) {
  raw_->set("colo/unsigned", bytes("from outside"));
  std::string what = error_of<DistError>([&] { store_->get("colo/unsigned"); });
  EXPECT_NE(what.find("under key 'colo/unsigned' that no rank of this job wrote: it carries no signature"),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("COLO_JOB_TOKEN"), std::string::npos) << what;

  raw_->set("colo/other", SignedStore::seal(std::string(64, '8'), "colo/other", bytes("another job")));
  what = error_of<DistError>([&] { store_->get("colo/other"); });
  EXPECT_NE(what.find("it is signed with another token"), std::string::npos) << what;

  // A signed value copied under another key, or altered by a byte, is refused too.
  store_->set("colo/a", bytes("value of a"));
  raw_->set("colo/b", raw_->get("colo/a"));
  EXPECT_THROW(store_->get("colo/b"), DistError);
  std::vector<uint8_t> altered = raw_->get("colo/a");
  altered.back() ^= 1;
  raw_->set("colo/a", altered);
  EXPECT_THROW(store_->get("colo/a"), DistError);
  std::vector<uint8_t> truncated(altered.begin(), altered.begin() + 12);
  raw_->set("colo/a", truncated);
  EXPECT_THROW(store_->get("colo/a"), DistError);
}

// Through the public API: a world of one with a token signs its store and still knows the store
// is a file.
TEST(JobToken, AWorldWithATokenSignsItsStore) {
  testing::TemporaryDirectory dir;
  Environment env;
  env.rdzv_file = dir.file("store");
  env.job_token = std::string(64, '5');
  ProcessGroup::Options options;
  options.timeout = std::chrono::seconds(10);
  auto world = init_world(env, options);
  EXPECT_TRUE(world->store_is_file());
  world->store_set("colo/test/key", "value");
  EXPECT_EQ(world->store_get("colo/test/key"), "value");
  c10d::FileStore raw(env.rdzv_file, 2);
  raw.set("colo/test/forged", bytes("forged"));
  const std::string what = error_of<DistError>([&] { world->store_get("colo/test/forged"); });
  EXPECT_NE(what.find("'colo/test/forged' that no rank of this job wrote"), std::string::npos) << what;
}

}  // namespace
}  // namespace colo::dist
