#include <colo/env/elastic.h>
#include <colo/env/fault_injection.h>

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <map>

namespace colo::env {
namespace {

constexpr const char* kVariable = "COLO_FAULT";
constexpr const char* kForm = "rank=R,step=S,kind=crash|hang|nostart[,restart=K], several separated by ';'";

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::size_t from = 0;
  for (;;) {
    const std::size_t at = s.find(sep, from);
    parts.push_back(s.substr(from, at == std::string::npos ? std::string::npos : at - from));
    if (at == std::string::npos) return parts;
    from = at + 1;
  }
}

[[noreturn]] void bad(const std::string& fault, const std::string& what) {
  throw VariableError(fmt::format("environment variable {}: fault '{}': {}; the form is {} (docs/failures.md)",
                                  kVariable, fault, what, kForm));
}

long long whole_number(const std::string& fault, const std::string& key, const std::string& value, long long max) {
  bool digits = !value.empty() && value.size() <= 18;
  for (char c : value) digits = digits && c >= '0' && c <= '9';
  if (!digits || std::stoll(value) > max) {
    bad(fault, fmt::format("{}='{}' is not a whole number from 0 to {}", key, value, max));
  }
  return std::stoll(value);
}

Fault parse_fault(const std::string& text) {
  std::map<std::string, std::string> fields;
  for (const std::string& pair : split(text, ',')) {
    const std::size_t eq = pair.find('=');
    if (eq == std::string::npos) bad(text, fmt::format("'{}' is not key=value", pair));
    const std::string key = pair.substr(0, eq);
    if (key != "rank" && key != "step" && key != "kind" && key != "restart") {
      bad(text, fmt::format("unknown key '{}' (the keys are rank, step, kind, restart)", key));
    }
    if (!fields.emplace(key, pair.substr(eq + 1)).second) bad(text, fmt::format("'{}' is given twice", key));
  }
  Fault fault;
  if (!fields.count("kind")) bad(text, "kind is missing");
  const std::string& kind = fields["kind"];
  if (kind == "crash") {
    fault.kind = Fault::Kind::kCrash;
  } else if (kind == "hang") {
    fault.kind = Fault::Kind::kHang;
  } else if (kind == "nostart") {
    fault.kind = Fault::Kind::kNoStart;
  } else {
    bad(text, fmt::format("kind='{}' is none of crash, hang, nostart", kind));
  }
  if (!fields.count("rank")) bad(text, "rank is missing");
  fault.rank = static_cast<int>(whole_number(text, "rank", fields["rank"], INT_MAX));
  if (fault.kind == Fault::Kind::kNoStart) {
    if (fields.count("step")) bad(text, "a nostart fault fires before any step: drop step");
  } else {
    if (!fields.count("step")) bad(text, "step is missing");
    fault.step = whole_number(text, "step", fields["step"], LLONG_MAX / 2);
  }
  if (fields.count("restart")) fault.restart = whole_number(text, "restart", fields["restart"], INT_MAX);
  return fault;
}

const char* kind_name(Fault::Kind kind) {
  switch (kind) {
    case Fault::Kind::kCrash:
      return "crash";
    case Fault::Kind::kHang:
      return "hang";
    case Fault::Kind::kNoStart:
      return "nostart";
  }
  return "?";
}

void announce(const Fault& fault, int rank, const std::string& where) {
  // stderr is unbuffered; fflush covers a program that made it buffered.
  std::fprintf(stderr, "colo: COLO_FAULT: injected %s on rank %d %s (restart %lld)\n", kind_name(fault.kind), rank,
               where.c_str(), fault.restart);
  std::fflush(stderr);
  std::fflush(stdout);
}

}  // namespace

std::vector<Fault> faults(const Lookup& lookup) {
  const std::optional<std::string> value = text(kVariable, lookup);
  std::vector<Fault> found;
  if (!value) return found;
  for (const std::string& part : split(*value, ';')) {
    if (!part.empty()) found.push_back(parse_fault(part));
  }
  return found;
}

long long restart_count(const Lookup& lookup) {
  return integer("COLO_RESTART_COUNT", 0, INT_MAX, "restarts", lookup).value_or(0);
}

std::optional<Fault> fault_at_step(int rank, long long step, const Lookup& lookup) {
  const std::vector<Fault> all = faults(lookup);
  if (all.empty()) return std::nullopt;
  const long long restart = restart_count(lookup);
  for (const Fault& fault : all) {
    if (fault.kind != Fault::Kind::kNoStart && fault.rank == rank && fault.step == step && fault.restart == restart) {
      return fault;
    }
  }
  return std::nullopt;
}

void inject_fault_at_step(int rank, long long step) {
  const std::optional<Fault> fault = fault_at_step(rank, step);
  if (!fault) return;
  announce(*fault, rank, fmt::format("after step {}", step));
  if (fault->kind == Fault::Kind::kCrash) {
    ::kill(::getpid(), SIGKILL);
  }
  // A hang: no progress, no exit, as a rank stuck in a driver or a dead peer's socket would.
  // SIGTERM and SIGKILL (colo-run's stop) still end it.
  for (;;) ::pause();
}

void inject_fault_before_start(int rank) {
  const std::vector<Fault> all = faults();
  if (all.empty()) return;
  const long long restart = restart_count();
  for (const Fault& fault : all) {
    if (fault.kind == Fault::Kind::kNoStart && fault.rank == rank && fault.restart == restart) {
      announce(fault, rank, "before the rendezvous");
      // As a slot that fails its start-up probe does: colo-run --elastic leaves it out.
      leave_elastic_note(text("COLO_RUN_REPORTS").value_or(""), ElasticNote::kCannotStart, rank,
                         fmt::format("COLO_FAULT's nostart fault on rank {}", rank));
      std::_Exit(3);
    }
  }
}

}  // namespace colo::env
