#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "launcher.h"

// The nodes' colo-runs agreeing on each restart (--max-restarts with --nnodes > 1). Node 0's
// colo-run listens on --control-port (default --master-port + 1) at --master-addr; every other
// node's colo-run connects before the first attempt, and both sides prove they hold the job token
// (HMAC-SHA256 over the other side's fresh nonce; the token itself never crosses the wire). The
// other node's hello also says how many ranks it can start (SLOTS: --nproc-per-node, or under
// --elastic its live slots). Then, one line per message:
//   node 0 -> node i:  go K W R L [why]   start attempt K (K = COLO_RESTART_COUNT) now, with a world
//                                         of W ranks: this node runs L of them (0: it sits the
//                                         attempt out), global ranks R .. R + L - 1
//                      stop K why         stop this node's ranks of attempt K (another node failed)
//                      end CODE [why]     the job is over (or, under --elastic, over for this node:
//                                         it was left out): exit with CODE
//   node i -> node 0:  failed K CODE KIND why              a rank of this node failed in attempt K (at once)
//                      done K CODE KIND SLOTS REFUSED why  this node's ranks of attempt K have all
//                                         exited; SLOTS: the ranks it can start next (--elastic
//                                         leaves out a slot whose rank could not start); REFUSED 1:
//                                         a rank said the program cannot use attempt K's world
// KIND is ok, failed (a rank's failure: restartable), fatal (colo-run interrupted, a program that
// cannot start: not restartable) or stopped (stopped by node 0). Node 0 decides: the first failure
// anywhere stops every node, and the job starts again on every node or ends on every node with that
// failure's status. A node whose colo-run goes away (its connection closes, or TCP keep-alive finds
// its host gone) or does not answer in time is named, and the job ends: it cannot restart without
// it; under --elastic the job restarts without it instead (node 0 itself cannot be left out: its
// rank 0 serves the store at --master-addr). Under --elastic node 0 also chooses each attempt's
// world: the nodes in node order, each with its live slots (a node with fewer than MIN is left out),
// the world lowered below every world the program refused, ranks taken off the last nodes first.
namespace colo::launcher {

// How this node's ranks ended an attempt, in the link's words.
struct NodeReport {
  int exit_code = 0;
  std::string kind;  // ok, failed, fatal, stopped
  std::string why;   // colo-run's words for the cause; empty when ok
  int slots = 0;     // the ranks this node can start next
  bool refused_world = false;  // a rank said the program cannot use this attempt's world (--elastic)
};

// This node's part of an attempt, as node 0 assigned it.
struct NodeShare {
  int world_size = 0;
  int first_rank = 0;
  int local_size = 0;  // 0: this node sits the attempt out
};

// What node 0 decided (before the first attempt, and after each).
struct NodeVerdict {
  bool restart = false;  // start attempt `next_attempt` (the first: attempt 0) with `share`
  int next_attempt = 0;
  NodeShare share;
  int exit_code = 0;     // else exit with this
  std::string why;       // the cause, as every node prints it
};

class NodeLink {
 public:
  // Node 0: listens and waits (the job's timeout) for every other node's colo-run to connect and
  // prove its token; the others: connect (retrying until the job's timeout) and prove. Throws
  // std::runtime_error naming the node(s) that did not come, or a refused proof.
  explicit NodeLink(const LaunchConfig& config);
  ~NodeLink();
  NodeLink(const NodeLink&) = delete;
  NodeLink& operator=(const NodeLink&) = delete;

  // Before the first attempt: node 0 assigns every node its share and tells it to start; the
  // others wait for node 0's word. restart: start attempt 0 with the share; else the job is over
  // (node 0 ended it, or node 0 was lost).
  NodeVerdict start();

  // While the attempt runs (job.cpp polls these): the descriptors to watch, and what to do when
  // one is readable. Returns why this node's ranks must stop, if they must.
  std::vector<int> descriptors() const;
  std::optional<std::string> readable(int fd);
  // A cause arose on this node (a rank failed, colo-run was interrupted): tell the other nodes now.
  void failed_here(const NodeReport& report);

  // After this node's ranks have all exited (or at once, for a node that sat the attempt out):
  // node 0 collects every node's report and decides; the others report and wait for the decision.
  // Under --elastic node 0 also prints what it decided about the world.
  NodeVerdict finish(const NodeReport& here);

  struct Peer;  // one connection to another node's colo-run (node_link_peer.h)

 private:
  void send(Peer& peer, const std::string& line);
  void broadcast_stop(const std::string& why, int except_node);
  void end_everywhere(const NodeVerdict& verdict);
  std::optional<std::string> handle_line_from(Peer& peer, const std::string& line);
  std::optional<std::string> peer_lost(Peer& peer, const std::string& how);
  void begin(int attempt);
  // Node 0: every node's share of the next attempt from their slots (node 0's: `own_slots`),
  // sending each node its go; nullopt after telling every node why the job cannot go on.
  std::optional<NodeShare> assign_and_go(int attempt, int own_slots, const std::string& why,
                                         std::vector<std::string>& said, std::string& stop_why);
  bool elastic() const { return config_.elastic_max > 0; }

  const LaunchConfig& config_;
  std::vector<Peer> peers_;  // node 0: one per other node; else: node 0
  int attempt_ = 0;
  // Node 0: the attempt's first failure (any node's), and whether any node's failure is fatal.
  std::optional<NodeReport> first_failure_;
  int first_failure_node_ = -1;
  // Another node: node 0's word that arrived while the ranks ran (an end, or its loss), for finish().
  std::optional<NodeVerdict> ended_;
  // Node 0 under --elastic: the largest world the program has not refused, and the last world.
  int world_cap_ = 0;
  int last_world_ = 0;
};

// "node 0's colo-run at HOST:PORT" style text for the control endpoint, used in messages.
std::string control_endpoint(const LaunchConfig& config);

}  // namespace colo::launcher
