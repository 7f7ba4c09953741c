// PeerAddresses: the addresses Gloo's pairs publish while a group connects, decoded, and a
// failure's "[host]:port" turned into the member's rank. (A real dead peer: dist_job_test.cpp.)
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "peer_addresses.h"

namespace colo::dist {
namespace {

// One published address as Gloo's tcp::Address lays it out: a sockaddr_storage, then a sequence
// number.
std::vector<uint8_t> address_bytes(const char* host, int port) {
  sockaddr_storage ss{};
  auto* in = reinterpret_cast<sockaddr_in*>(&ss);
  in->sin_family = AF_INET;
  in->sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, host, &in->sin_addr);
  std::vector<uint8_t> bytes(sizeof ss + sizeof(ssize_t), 0xff);
  std::memcpy(bytes.data(), &ss, sizeof ss);
  return bytes;
}

std::vector<uint8_t> concat(std::vector<std::vector<uint8_t>> parts) {
  std::vector<uint8_t> all;
  for (const auto& p : parts) all.insert(all.end(), p.begin(), p.end());
  return all;
}

TEST(PeerAddresses, AFailingPeersAddressNamesItsRank) {
  PeerAddresses peers;
  auto store = peers.recording(c10::make_intrusive<c10d::HashStore>());
  // A group of three: each member publishes one address per peer under a key ending in its rank;
  // this member (rank 0) sets its own and gets the others'.
  store->set("0/0", concat({address_bytes("127.0.0.1", 41000), address_bytes("127.0.0.1", 41001)}));
  store->set("0/1-raw", concat({address_bytes("127.0.0.1", 42000), address_bytes("127.0.0.1", 42001)}));
  store->set("other/1", concat({address_bytes("127.0.0.1", 42000), address_bytes("127.0.0.1", 42001)}));
  store->set("0/2", concat({address_bytes("10.1.2.3", 43000), address_bytes("10.1.2.3", 43001)}));
  store->get("other/1");
  store->set("0/hostname_2", {'n', 'o', 'd', 'e'});  // no address: skipped
  peers.learn(3);
  store->set("0/9", concat({address_bytes("127.0.0.1", 44000), address_bytes("127.0.0.1", 44001)}));  // too late

  EXPECT_EQ(peers.member_at("127.0.0.1", 42001), 1);
  EXPECT_EQ(peers.member_at("10.1.2.3", 43000), 2);
  EXPECT_EQ(peers.member_at("127.0.0.1", htons(43000)), std::nullopt) << "another host";
  EXPECT_EQ(peers.member_at("10.1.2.3", htons(43000)), 2) << "the port as Gloo may print it, unswapped";
  EXPECT_EQ(peers.member_at("127.0.0.1", 44000), std::nullopt) << "recorded after learn()";

  std::optional<int> first;
  const std::string named = peers.name_members(
      "[../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:42000; then "
      "[10.1.2.3]:43001 and [127.0.0.1]:9 (unknown)",
      {4, 5, 6}, &first);
  EXPECT_EQ(named,
            "[../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:42000 (rank 1 "
            "(global 5)); then [10.1.2.3]:43001 (rank 2 (global 6)) and [127.0.0.1]:9 (unknown)");
  EXPECT_EQ(first, 1);
  EXPECT_EQ(peers.name_members("no address here", {4, 5, 6}), "no address here");
}

}  // namespace
}  // namespace colo::dist
