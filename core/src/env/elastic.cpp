#include <colo/env/elastic.h>

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <climits>
#include <fstream>

namespace colo::env {

std::optional<int> elastic_max_world(const Lookup& lookup) {
  const auto value = integer(kElasticMaxWorldVariable, 1, INT_MAX, "ranks", lookup);
  if (!value) return std::nullopt;
  return static_cast<int>(*value);
}

std::string elastic_note_path(const std::string& run_reports, ElasticNote kind, int rank) {
  return fmt::format("{}/{}.{}", run_reports, kind == ElasticNote::kCannotStart ? "cannot-start" : "world-size-unusable",
                     rank);
}

void leave_elastic_note(const std::string& run_reports, ElasticNote kind, int rank, const std::string& reason) {
  if (run_reports.empty()) return;
  const std::string path = elastic_note_path(run_reports, kind, rank);
  const std::string partial = path + ".partial";
  const int fd = ::open(partial.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) return;
  std::string line = reason;
  for (char& c : line) {
    if (c == '\n') c = ' ';
  }
  line += '\n';
  const bool written = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  ::close(fd);
  if (!written || ::rename(partial.c_str(), path.c_str()) != 0) ::unlink(partial.c_str());
}

std::optional<std::string> read_elastic_note(const std::string& run_reports, ElasticNote kind, int rank) {
  if (run_reports.empty()) return std::nullopt;
  std::ifstream in(elastic_note_path(run_reports, kind, rank));
  if (!in) return std::nullopt;
  std::string reason;
  std::getline(in, reason);
  return reason;
}

}  // namespace colo::env
