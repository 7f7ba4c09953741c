// Every collective on every mesh axis, for every mesh shape the world size allows.
#include "dist_test_env.h"

#include <colo/dist/errors.h>
#include <colo/dist/process_group.h>
#include <colo/dist/process_group_mesh.h>

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <numeric>
#include <thread>

namespace colo::dist {
namespace {

using test::device;
using test::world;

std::vector<MeshShape> shapes_for(int n) {
  std::vector<MeshShape> shapes;
  for (int pp = 1; pp <= n; ++pp) {
    for (int tp = 1; pp * tp <= n; ++tp) {
      if (n % (pp * tp) == 0) shapes.push_back(dp_pp_tp_shape(n / (pp * tp), pp, tp));
    }
  }
  return shapes;
}

// Checks all collectives on one group whose members' global ranks are `g.global_ranks()`.
void check_collectives(ProcessGroup& g) {
  const int n = g.size();
  const int me = g.rank();
  const auto& ranks = g.global_ranks();
  double rank_sum = 0;
  for (int r : ranks) rank_sum += r;

  auto t = torch::full({3}, static_cast<double>(ranks[me]), torch::kFloat64).to(device());
  g.all_reduce(t).wait();
  EXPECT_TRUE(torch::allclose(t, torch::full({3}, rank_sum, torch::kFloat64).to(device()))) << g.describe();

  t = torch::full({2}, static_cast<double>(ranks[me]), torch::kFloat64).to(device());
  g.all_reduce(t, ReduceOp::kAvg).wait();
  EXPECT_NEAR(t[0].item<double>(), rank_sum / n, 1e-12) << g.describe();

  t = torch::full({1}, static_cast<double>(ranks[me]), torch::kFloat64).to(device());
  g.all_reduce(t, ReduceOp::kMax).wait();
  EXPECT_EQ(t.item<double>(), *std::max_element(ranks.begin(), ranks.end()));
  t = torch::full({1}, static_cast<double>(ranks[me]), torch::kFloat64).to(device());
  g.all_reduce(t, ReduceOp::kMin).wait();
  EXPECT_EQ(t.item<double>(), *std::min_element(ranks.begin(), ranks.end()));

  // all_gather: rows [2r, 2r+1] hold rank r's input.
  auto in = torch::tensor({ranks[me] * 10.0, ranks[me] * 10.0 + 1}, torch::kFloat32).to(device());
  auto out = torch::zeros({2 * n}, torch::kFloat32).to(device());
  g.all_gather(out, in).wait();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(out[2 * r].item<float>(), ranks[r] * 10.0f) << g.describe();
    EXPECT_EQ(out[2 * r + 1].item<float>(), ranks[r] * 10.0f + 1) << g.describe();
  }

  // reduce_scatter: input row i = i + global rank; this rank keeps rows [2me, 2me+1].
  auto rs_in = torch::arange(2 * n, torch::kFloat64).to(device()) + ranks[me];
  auto rs_out = torch::zeros({2}, torch::kFloat64).to(device());
  g.reduce_scatter(rs_out, rs_in).wait();
  EXPECT_EQ(rs_out[0].item<double>(), n * (2.0 * me) + rank_sum);
  EXPECT_EQ(rs_out[1].item<double>(), n * (2.0 * me + 1) + rank_sum);
  g.reduce_scatter(rs_out, rs_in.clone(), ReduceOp::kAvg).wait();
  EXPECT_NEAR(rs_out[0].item<double>(), 2.0 * me + rank_sum / n, 1e-12);

  for (int src = 0; src < n; ++src) {
    auto b = torch::full({4}, me == src ? 7.0 + src : -1.0, torch::kFloat32).to(device());
    g.broadcast(b, src).wait();
    EXPECT_TRUE(torch::equal(b, torch::full({4}, 7.0 + src, torch::kFloat32).to(device()))) << "broadcast from " << src;
  }

  if (n > 1) {
    // A ring where every rank sends and receives at once: deadlocks unless batched.
    auto send = torch::full({5}, static_cast<float>(ranks[me])).to(device());
    auto recv = torch::zeros({5}).to(device());
    const int next = (me + 1) % n;
    const int prev = (me + n - 1) % n;
    g.batch_send_recv({{P2POp::Kind::kSend, send, next}, {P2POp::Kind::kRecv, recv, prev}}).wait();
    EXPECT_TRUE(torch::equal(recv, torch::full({5}, static_cast<float>(ranks[prev])).to(device())));
    // Plain send/recv, lower rank sends first.
    if (me == 0) {
      g.send(torch::full({2}, 42.0f).to(device()), 1).wait();
    } else if (me == 1) {
      auto x = torch::zeros({2}).to(device());
      g.recv(x, 0).wait();
      EXPECT_EQ(x[1].item<float>(), 42.0f);
    }
  }
  g.barrier().wait();
}

TEST(ProcessGroup, WorldCollectives) { check_collectives(*world()); }

TEST(ProcessGroup, EveryAxisOfEveryMeshShape) {
  for (const auto& shape : shapes_for(world()->size())) {
    ProcessGroupMesh mesh(world(), shape);
    SCOPED_TRACE("mesh " + mesh.describe());
    const auto& dp = *mesh.group(MeshAxis::kDp);
    const auto& pp = *mesh.group(MeshAxis::kPp);
    const auto& tp = *mesh.group(MeshAxis::kTp);
    EXPECT_EQ(dp.size() * pp.size() * tp.size(), world()->size());
    // tp is innermost: a tp group is a run of consecutive global ranks.
    const auto& tp_ranks = tp.global_ranks();
    for (size_t i = 1; i < tp_ranks.size(); ++i) EXPECT_EQ(tp_ranks[i], tp_ranks[i - 1] + 1);
    // The coordinate this rank computes is the one every other rank computes for it.
    auto coords = torch::zeros({world()->size() * 3}, torch::kInt64).to(device());
    const auto c = mesh.coordinate();
    world()->all_gather(coords, torch::tensor({int64_t{c[0]}, int64_t{c[1]}, int64_t{c[2]}}).to(device())).wait();
    for (int r = 0; r < world()->size(); ++r) {
      const auto expected = mesh.coordinate_of(r);
      EXPECT_EQ(coords[3 * r].item<int64_t>(), expected[0]);
      EXPECT_EQ(coords[3 * r + 1].item<int64_t>(), expected[1]);
      EXPECT_EQ(coords[3 * r + 2].item<int64_t>(), expected[2]);
    }
    check_collectives(*mesh.group(MeshAxis::kDp));
    check_collectives(*mesh.group(MeshAxis::kPp));
    check_collectives(*mesh.group(MeshAxis::kTp));
  }
}

// The sum of the global ranks of a group, by all_reduce, against the sum of `members`.
void expect_members(ProcessGroup& g, const std::vector<int>& members, const std::string& what) {
  double expected = 0;
  for (int r : members) expected += r;
  auto t = torch::full({1}, static_cast<double>(g.global_rank(g.rank())), torch::kFloat64).to(device());
  g.all_reduce(t).wait();
  EXPECT_EQ(t.item<double>(), expected) << what << ": " << g.describe();
  EXPECT_EQ(g.size(), static_cast<int>(members.size())) << what;
}

// Four named axes, cp innermost: dp (what the world leaves) x pp 1 x tp 2 x cp 2 at 8 ranks,
// tp and cp of 2 where the world size allows. Each group's members are written out from
// rank = dp*(T*C) + tp*C + cp, not taken from the mesh.
TEST(ProcessGroup, GroupsOfFourNamedAxesAndOfSetsOfThem) {
  const int n = world()->size();
  const int T = n % 2 == 0 ? 2 : 1, C = n % 4 == 0 ? 2 : 1, D = n / (T * C);
  ProcessGroupMesh mesh(world(), {{"dp", 0}, {"pp", 1}, {"tp", T}, {"cp", C}},
                        {{"dp", "cp"}, {"cp", "tp"}, {"dp", "tp", "cp"}});
  SCOPED_TRACE("mesh " + mesh.describe());
  ASSERT_EQ(mesh.size("dp"), D);
  const int me = world()->rank();
  const int cp = me % C, tp = (me / C) % T, dp = me / (T * C);
  EXPECT_EQ(mesh.coordinate(), (MeshCoordinate{dp, 0, tp, cp}));
  std::vector<int> dp_members, tp_members, cp_members, dp_cp_members, tp_cp_members;
  for (int d = 0; d < D; ++d) dp_members.push_back(d * T * C + tp * C + cp);
  for (int t = 0; t < T; ++t) tp_members.push_back(dp * T * C + t * C + cp);
  for (int c = 0; c < C; ++c) cp_members.push_back(dp * T * C + tp * C + c);
  for (int d = 0; d < D; ++d) {
    for (int c = 0; c < C; ++c) dp_cp_members.push_back(d * T * C + tp * C + c);
  }
  for (int t = 0; t < T; ++t) {
    for (int c = 0; c < C; ++c) tp_cp_members.push_back(dp * T * C + t * C + c);
  }
  expect_members(*mesh.group("dp"), dp_members, "dp");
  expect_members(*mesh.group("pp"), {me}, "pp");
  expect_members(*mesh.group("tp"), tp_members, "tp");
  expect_members(*mesh.group("cp"), cp_members, "cp");
  expect_members(*mesh.group_over({"dp", "cp"}), dp_cp_members, "dp+cp");
  expect_members(*mesh.group_over({"tp", "cp"}), tp_cp_members, "tp+cp");
  // Groups over the whole world are the world; a one-rank axis has a group of its own.
  EXPECT_EQ(mesh.group_over({"dp", "tp", "cp"}), world()) << "pp is 1: dp, tp and cp span the world";
  if (n > 1) {
    EXPECT_NE(mesh.group("pp"), world());
  }
  EXPECT_EQ(mesh.group("tp") == world(), T == n);
  check_collectives(*mesh.group_over({"dp", "cp"}));
}

// Over Gloo, send and recv take only contiguous host memory; colo copies anything else through
// host memory (a strided view here, every CUDA tensor under COLO_BACKEND=gloo): each rank sends a
// transposed view to the next and receives into a column slice of a larger tensor, whose other
// columns must stay untouched. NCCL's send/recv take contiguous tensors only, and colo passes them
// on as they are.
TEST(ProcessGroup, PointToPointTakesStridedTensors) {
  if (world()->backend() == dist::Backend::kNccl) {
    GTEST_SKIP() << "NCCL's send/recv take contiguous tensors only (colo stages tensors for Gloo only)";
  }
  auto& g = *world();
  const int n = g.size();
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  const int me = g.rank();
  const int next = (me + 1) % n;
  const int prev = (me + n - 1) % n;
  // Rank r's message: a 3x4 matrix of r * 100 + column-major position, sent as the transposed view
  // of a 4x3 tensor.
  auto message_of = [&](int r) {
    return (torch::arange(12, torch::kFloat32).reshape({4, 3}) + 100.0f * static_cast<float>(r)).to(device());
  };
  const auto outgoing = message_of(me).t();
  ASSERT_FALSE(outgoing.is_contiguous());
  auto whole = torch::full({3, 7}, -1.0f, torch::kFloat32).to(device());
  auto arrival = whole.narrow(1, 2, 4);
  ASSERT_FALSE(arrival.is_contiguous());
  g.batch_send_recv({{P2POp::Kind::kSend, outgoing, next}, {P2POp::Kind::kRecv, arrival, prev}}).wait();
  EXPECT_TRUE(torch::equal(whole.narrow(1, 2, 4), message_of(prev).t())) << "from rank " << prev;
  for (const int64_t column : {0, 1, 6}) {
    EXPECT_TRUE(torch::equal(whole.select(1, column), torch::full({3}, -1.0f).to(device()))) << "column " << column;
  }
  // Plain send and recv, rank 0 to rank 1.
  if (me == 0) {
    g.send(outgoing, 1).wait();
  } else if (me == 1) {
    auto plain = torch::zeros({4, 3}, torch::kFloat32).to(device());
    g.recv(plain.t(), 0).wait();
    EXPECT_TRUE(torch::equal(plain, message_of(0)));
  }
  g.barrier().wait();
}

// A send reads its tensor after the work queued before it on the current CUDA stream, and a
// receive's data is there for the work queued after it, also on a stream other than the default
// one. (Under COLO_BACKEND=gloo colo copies through host memory on that stream; NCCL runs there.)
TEST(ProcessGroup, PointToPointFollowsTheCurrentCudaStream) {
  if (!device().is_cuda()) GTEST_SKIP() << "CUDA streams: GPU ranks only";
  auto& g = *world();
  if (g.size() < 2) GTEST_SKIP() << "needs two ranks";
  c10::impl::VirtualGuardImpl guard_impl(device().type());
  const c10::Stream side = guard_impl.getStreamFromGlobalPool(device(), /*isHighPriority=*/false);
  {
    c10::StreamGuard on_side(side);
    // Enough queued kernels that a send which did not wait for them would read an earlier value.
    const auto want = torch::full({1 << 20}, 41.0f, torch::kFloat32).to(device());
    if (g.rank() == 0) {
      auto x = torch::ones({1 << 20}, torch::kFloat32).to(device());
      for (int i = 0; i < 40; ++i) x = x + 1.0f;
      g.send(x, 1).wait();
    } else if (g.rank() == 1) {
      auto y = torch::zeros({1 << 20}, torch::kFloat32).to(device());
      g.recv(y, 0).wait();
      EXPECT_TRUE(torch::equal(y * 1.0f, want));
    }
    guard_impl.synchronizeStream(side);
  }
  g.barrier().wait();
}

// Rank 0 enters an all-reduce on a {0, 1} group that rank 1 never joins. With rank 1 alive but
// absent the operation must time out, naming rank 1 as the member that did not arrive; with rank
// 1's group gone it must fail at once. Either way the error names the operation and the group.
void expect_lonely_all_reduce_fails(bool peer_stays, std::chrono::milliseconds timeout) {
  const bool member = world()->rank() < 2;
  std::shared_ptr<ProcessGroup> pair;
  if (member) pair = world()->new_subgroup({0, 1}, "lonely_pair", timeout);
  // Rank 1 may finish creating the group (Gloo's connection handshake) before rank 0 does: were
  // it to drop the group then, rank 0's creation, not its all-reduce, would see the closed
  // connection. So both finish first.
  world()->barrier().wait();
  if (member && !peer_stays && pair->rank() == 1) pair.reset();
  if (member && pair && pair->rank() == 0) {
    auto t = torch::ones({1}).to(device());
    const auto start = std::chrono::steady_clock::now();
    try {
      pair->all_reduce(t).wait();
      ADD_FAILURE() << "all_reduce with an absent peer returned";
    } catch (const DistError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("all_reduce"), std::string::npos) << what;
      EXPECT_NE(what.find("lonely_pair"), std::string::npos) << what;
      EXPECT_NE(what.find("global ranks 0,1"), std::string::npos) << what;
      if (peer_stays) {
        EXPECT_NE(what.find("imed out"), std::string::npos) << what;
        EXPECT_NE(what.find("all_reduce #1 on group lonely_pair"), std::string::npos) << what;
        EXPECT_NE(what.find("Did not arrive at all_reduce #1: rank 1 (global 1), never seen waiting in this group"),
                  std::string::npos)
            << what;
      }
    }
    const auto elapsed = std::chrono::steady_clock::now() - start;
    if (peer_stays) {
      EXPECT_GE(elapsed, timeout * 9 / 10);
    }
    EXPECT_LT(elapsed, timeout + std::chrono::seconds(10));
  }
  world()->barrier().wait();
}

// Over NCCL an abandoned collective cannot be cancelled: its kernel stays on the GPU and
// PyTorch's NCCL watchdog tears the process down at the timeout (colo-run then stops the job,
// naming the rank; see colo_run_test.cpp). These two tests need a backend that returns control.
// And they need a peer: ranks 0 and 1 form the group whose collective is abandoned.
#define COLO_SKIP_ON_NCCL_OR_ONE_RANK()                                                            \
  if (world()->backend() == dist::Backend::kNccl) {                                                \
    GTEST_SKIP() << "an abandoned NCCL collective ends the process (watchdog), not the operation"; \
  }                                                                                                \
  if (world()->size() < 2) GTEST_SKIP() << "needs two ranks";

TEST(ProcessGroup, TimeoutNamesOperationAndGroup) {
  COLO_SKIP_ON_NCCL_OR_ONE_RANK();
  expect_lonely_all_reduce_fails(/*peer_stays=*/true, std::chrono::milliseconds(1500));
}

TEST(ProcessGroup, DeadPeerFailsFastNamingTheGroup) {
  COLO_SKIP_ON_NCCL_OR_ONE_RANK();
  expect_lonely_all_reduce_fails(/*peer_stays=*/false, std::chrono::milliseconds(20000));
}

// Rank 0 asks for a {0, 1} group that rank 1 never asks for: the creation fails at the group's
// timeout with an error that names the group, its ranks and what every member must do, not
// only the backend's words about a store key. (NCCL creates its communicators lazily, at the
// first collective, so there the creation itself does not wait.)
TEST(ProcessGroup, AHalfMadeGroupNamesItselfAndWhatToDo) {
  COLO_SKIP_ON_NCCL_OR_ONE_RANK();
  if (world()->rank() == 0) {
    const auto start = std::chrono::steady_clock::now();
    try {
      world()->new_subgroup({0, 1}, "half_made", std::chrono::milliseconds(1500));
      ADD_FAILURE() << "new_subgroup returned a group that rank 1 never created";
    } catch (const DistError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("rank 0: creating the gloo group 'half_made' of global ranks [0,1] failed"),
                std::string::npos)
          << what;
      EXPECT_NE(what.find("Every member must call new_subgroup with the same ranks and name"), std::string::npos)
          << what;
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  }
  world()->barrier().wait();
}

// A group of the whole world whose last member skips all_reduce #2: every member that waited
// names the last one, and only it, with where it was last seen waiting (#1, where rank 0's late
// arrival kept everyone else waiting long enough to record it).
//
// Driven by events, not by the machine's speed (8 ranks share 2 cores in CI): rank 0 joins #1
// only once the last member has said, through the store, that it is about to enter #1, and then
// three tenths of the timeout later; a wait is recorded after one tenth, so the last member's
// record is certain unless it is descheduled for 0.8 s between its store write and its call. A
// world barrier lines the members up before #2, whose 4 s timeout each of them waits out: a
// member is named as absent only if it entered #2 more than 3.6 s after another timed out there.
TEST(ProcessGroup, TimeoutNamesTheMembersThatDidNotArrive) {
  COLO_SKIP_ON_NCCL_OR_ONE_RANK();
  const int n = world()->size();
  std::vector<int> all(static_cast<std::size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  const auto timeout = std::chrono::milliseconds(4000);
  auto group = world()->new_subgroup(all, "roll_call", timeout);
  auto t = torch::ones({1}).to(device());
  const int skipper = n - 1;
  const std::string arriving = "roll_call_skipper_enters_1";
  if (group->rank() == skipper) world()->store_set(arriving, "1");
  if (group->rank() == 0) {
    world()->store_get(arriving);
    std::this_thread::sleep_for(timeout * 3 / 10);
  }
  group->all_reduce(t).wait();
  world()->barrier().wait();

  if (group->rank() != skipper) {
    const auto start = std::chrono::steady_clock::now();
    try {
      group->all_reduce(t).wait();
      ADD_FAILURE() << "all_reduce #2 returned without rank " << skipper;
    } catch (const DistError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("all_reduce #2 on group roll_call"), std::string::npos) << what;
      EXPECT_NE(what.find(fmt::format("Did not arrive at all_reduce #2: rank {} (global {}), last seen waiting at "
                                      "all_reduce #1.",
                                      skipper, skipper)),
                std::string::npos)
          << what;
      for (int member = 0; member < skipper; ++member) {
        EXPECT_EQ(what.find(fmt::format("rank {} (global", member)), std::string::npos)
            << "rank " << member << " arrived, yet is named: " << what;
      }
    }
    // The timeout ends the wait: a bound far above it (10 s for scheduling) that a hang would pass.
    EXPECT_LT(std::chrono::steady_clock::now() - start, timeout + std::chrono::seconds(10));
  }
  // Every member keeps its end of the group open until all have given up on #2: a member that
  // closed early would fail its neighbours at once, before they could record their arrival.
  world()->barrier().wait();
  group->close();
  world()->barrier().wait();
}

// A member that closes a group the moment new_subgroup returns must not break the group's
// creation on a member still connecting: Gloo's pairs count as connected once the TCP handshake
// is done, so without the closing barrier a fast member tore its sockets down while a slow one
// was still accepting them ("Connection closed by peer" while creating; the dist_np8 flake of
// 2026-11-27, where a plugin refused cuda_graphs right after making its mesh). Rank 1 arrives
// late at every creation so that the others wait on it and then race to finish.
TEST(ProcessGroup, AGroupClosedAtOnceByOneMemberIsWholeForTheOthers) {
  COLO_SKIP_ON_NCCL_OR_ONE_RANK();
  const int n = world()->size();
  std::vector<int> all(static_cast<std::size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  for (int round = 0; round < 30; ++round) {
    if (world()->rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    auto group = world()->new_subgroup(all, "closed_at_once");
    group->close();
    for (const auto& shape : shapes_for(n)) ProcessGroupMesh mesh(world(), shape);  // made and dropped
  }
  world()->barrier().wait();
}

// close() lets work this rank queued finish first, then ends the group: every later operation
// says the group is closed, closing again is harmless, and other groups keep working.
TEST(ProcessGroup, ClosedGroupFinishesQueuedWorkThenRefusesOperations) {
  const int n = world()->size();
  std::vector<int> all(static_cast<std::size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  auto group = world()->new_subgroup(all, "closing");
  auto queued = torch::ones({1 << 16}, torch::kFloat32).to(device());
  group->all_reduce(queued);  // not waited for: close() must not cut it off
  EXPECT_FALSE(group->closed());
  group->close();
  EXPECT_TRUE(group->closed());
  EXPECT_TRUE(torch::equal(queued, torch::full_like(queued, n)));
  group->close();

  auto t = torch::ones({4}, torch::kFloat32).to(device());
  try {
    group->all_reduce(t);
    ADD_FAILURE() << "all_reduce on a closed group was accepted";
  } catch (const DistError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("all_reduce on group closing"), std::string::npos) << what;
    EXPECT_NE(what.find("was closed"), std::string::npos) << what;
  }
  EXPECT_THROW(group->barrier(), DistError);
  EXPECT_THROW(group->broadcast(t, 0), DistError);
  EXPECT_THROW(group->new_subgroup(all, "child"), DistError);

  world()->all_reduce(t).wait();
  EXPECT_TRUE(torch::equal(t, torch::full_like(t, n)));
}

// A peer that stays but never joins a collective must not hold close() up past its bound. Rank 0
// queues an all-reduce that rank 1 never joins; the group's timeout (60 s) is far longer than the
// bound given to close() (2 s), so without the bound close() would wait for the timeout: over
// Gloo in the backend's destructor, over NCCL in the drain (the abort then ends the kernel).
TEST(ProcessGroup, CloseGivesUpAfterItsBoundOnACollectiveAPeerNeverJoins) {
  if (world()->size() < 2) GTEST_SKIP() << "needs two ranks";
  const auto bound = std::chrono::milliseconds(2000);
  if (world()->rank() < 2) {
    auto group = world()->new_subgroup({0, 1}, "stuck", std::chrono::seconds(60));
    auto t = torch::ones({4}, torch::kFloat32).to(device());
    group->all_reduce(t).wait();  // both: NCCL creates its communicator at the first collective
    if (group->rank() == 0) {
      group->all_reduce(t);  // rank 1 never joins this one
      const auto start = std::chrono::steady_clock::now();
      group->close(bound);
      const auto elapsed_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
      EXPECT_TRUE(group->closed());
      // Two waits of at most `bound` each, and what happens between them.
      EXPECT_LT(elapsed_ms, (bound * 2 + std::chrono::seconds(3)).count());
    }
    // Rank 1 keeps its end open, and silent, until rank 0 has closed.
    world()->barrier().wait();
  } else {
    world()->barrier().wait();
  }
}

// A Work and its copies are one operation: the average's division (its completion step over
// Gloo) happens once however many copies are waited for, and a default Work is already done.
TEST(ProcessGroup, CopiesOfAWorkCompleteOnce) {
  auto& g = *world();
  auto t = torch::full({2}, static_cast<double>(g.rank() + 1), torch::kFloat64).to(device());
  Work first = g.all_reduce(t, ReduceOp::kAvg);
  Work second = first;
  first.wait();
  second.wait();
  first.wait();
  const double n = g.size();
  EXPECT_NEAR(t[0].item<double>(), (n + 1) / 2, 1e-12) << "the average was divided more than once";
  EXPECT_TRUE(second.is_completed());
  Work empty;
  EXPECT_TRUE(empty.is_completed());
  empty.wait();
}

// The job's store carries strings, binary ones included, from one rank to every other.
TEST(ProcessGroup, StoreCarriesBytesBetweenRanks) {
  auto& g = *world();
  const std::string key = "colo/test/store_bytes";
  const char raw[] = "path\0with a NUL and \xff";
  const std::string sent = std::string(raw, sizeof raw - 1) + std::to_string(g.size());
  if (g.rank() == 0) g.store_set(key, sent);
  EXPECT_EQ(g.store_get(key), sent);
  g.barrier().wait();
}

TEST(ProcessGroup, ShapeErrorsSayWhatFits) {
  const int n = world()->size();
  try {
    ProcessGroupMesh::resolve(dp_pp_tp_shape(0, 3, 1), n);
    ADD_FAILURE() << "pp=3 accepted for world size " << n;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("not divisible"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ProcessGroupMesh::resolve(dp_pp_tp_shape(n + 1, 1, 1), n), std::invalid_argument);
}

}  // namespace
}  // namespace colo::dist
