#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace colo::detail {

// MetricsLogHook's file (train_vit's --metrics FILE): one JSON object per line, flushed line by line so that a crashed or running
// job's file is readable (`tail -f`, `jq`). Only rank 0 writes. A disabled log (no file) accepts
// and drops records, so the training loop need not ask.
class MetricsLog {
 public:
  MetricsLog() = default;
  // append: keep what the file holds (a resumed run continues its predecessor's log); else
  // truncate. Throws std::runtime_error naming the file when it cannot be opened.
  MetricsLog(const std::string& path, bool append);

  bool enabled() const { return out_.is_open(); }
  void write(const nlohmann::json& record);

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace colo::detail
