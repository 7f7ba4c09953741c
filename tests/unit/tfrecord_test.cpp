// TFRecord framing of TensorBoard's event files (trainer/src/tensorboard/tfrecord.h): the CRC-32C
// against the algorithm's published check value and RFC 3720's test vectors, and the record layout.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "tensorboard/tfrecord.h"

namespace colo::detail {
namespace {

uint32_t crc_of(const std::string& s) { return crc32c(s.data(), s.size()); }

uint32_t little_endian_u32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(s[at + i])) << (8 * i);
  return v;
}

TEST(TfRecord, Crc32cMatchesItsCheckValueAndRfc3720) {
  EXPECT_EQ(crc_of("123456789"), 0xE3069283u);
  EXPECT_EQ(crc_of(std::string(32, '\0')), 0x8A9136AAu);   // RFC 3720 B.4: 32 bytes of zeros
  EXPECT_EQ(crc_of(std::string(32, '\xff')), 0x62A8AB43u);  // 32 bytes of ones
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(crc_of(ascending), 0x46DD794Eu);
  EXPECT_EQ(crc_of(""), 0u);
}

TEST(TfRecord, MaskRotatesAndAddsTheConstant) {
  const uint32_t crc = crc_of("123456789");
  EXPECT_EQ(masked_crc32c("123456789", 9), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
  EXPECT_NE(masked_crc32c("123456789", 9), crc);
}

TEST(TfRecord, RecordIsLengthItsCrcPayloadAndItsCrc) {
  const std::string payload = "event bytes";
  const std::string record = tfrecord(payload);
  ASSERT_EQ(record.size(), 8 + 4 + payload.size() + 4);
  // Little-endian length, then the masked CRC of those 8 bytes.
  EXPECT_EQ(static_cast<unsigned char>(record[0]), payload.size());
  for (int i = 1; i < 8; ++i) EXPECT_EQ(record[static_cast<size_t>(i)], '\0') << i;
  EXPECT_EQ(little_endian_u32(record, 8), masked_crc32c(record.data(), 8));
  EXPECT_EQ(record.substr(12, payload.size()), payload);
  EXPECT_EQ(little_endian_u32(record, 12 + payload.size()), masked_crc32c(payload.data(), payload.size()));
  // An empty payload still has its frame.
  EXPECT_EQ(tfrecord("").size(), 16u);
}

}  // namespace
}  // namespace colo::detail
