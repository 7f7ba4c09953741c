#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

// TFRecord framing, the container of TensorBoard's event files: each record is its length, a
// checksum of the length, the data and a checksum of the data. The checksums are CRC-32C
// (Castagnoli), "masked" so that a CRC of data that itself holds CRCs is not trivially related
// to them. Boost.CRC computes the CRC (Debian 12 packages no Google crc32c library).
namespace colo::detail {

// CRC-32C of `size` bytes at `data` (the iSCSI CRC: crc32c("123456789") == 0xE3069283).
uint32_t crc32c(const void* data, size_t size);
// TFRecord's mask over a CRC: rotate right by 15 bits, add 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t size);
// One record around `payload`: uint64 length (little-endian), masked CRC of those 8 bytes,
// payload, masked CRC of the payload.
std::string tfrecord(const std::string& payload);

}  // namespace colo::detail
