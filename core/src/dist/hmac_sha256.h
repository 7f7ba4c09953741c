#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace colo::dist {

// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for the job token's signatures on the store's
// values (signed_store.h). colo's own, in a hundred lines, because its allowed dependencies hold
// no cryptography library; tested against the FIPS and RFC 4231 vectors (dist_test.cpp).
using Sha256Digest = std::array<uint8_t, 32>;

Sha256Digest sha256(const std::string& message);
Sha256Digest hmac_sha256(const std::string& key, const std::string& message);

// Compares two digests in time that does not depend on where they differ.
bool digests_equal(const Sha256Digest& a, const Sha256Digest& b);

std::string to_hex(const Sha256Digest& digest);

}  // namespace colo::dist
