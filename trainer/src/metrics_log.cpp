#include "metrics_log.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace colo::detail {

MetricsLog::MetricsLog(const std::string& path, bool append)
    : path_(path), out_(path, append ? std::ios::app : std::ios::trunc) {
  if (!out_) {
    throw std::runtime_error(
        fmt::format("metrics log {}: cannot open the file for writing ({}); check the directory "
                    "exists and is writable",
                    path, std::strerror(errno)));
  }
}

void MetricsLog::write(const nlohmann::json& record) {
  if (!enabled()) return;
  out_ << record.dump() << '\n';
  out_.flush();
  if (!out_) throw std::runtime_error(fmt::format("metrics log {}: write failed (disk full?)", path_));
}

}  // namespace colo::detail
