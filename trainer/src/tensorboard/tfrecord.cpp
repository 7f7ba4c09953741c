#include "tfrecord.h"

#include <boost/crc.hpp>

namespace colo::detail {

namespace {

// Little-endian bytes of `value`, whatever the host's order.
template <typename T>
void append_little_endian(std::string& out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  // Castagnoli's polynomial, reflected input and output, all-ones initial value and final XOR.
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(data, size);
  return crc.checksum();
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tfrecord(const std::string& payload) {
  std::string record;
  record.reserve(payload.size() + 16);
  append_little_endian(record, static_cast<uint64_t>(payload.size()));
  append_little_endian(record, masked_crc32c(record.data(), 8));
  record += payload;
  append_little_endian(record, masked_crc32c(payload.data(), payload.size()));
  return record;
}

}  // namespace colo::detail
