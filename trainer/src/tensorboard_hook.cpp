// TensorBoardHook: the Trainer's records as TensorBoard scalars. The event file itself is
// tensorboard/event_file.h's, built only where protobuf was found (COLO_HAS_TENSORBOARD).
#include <colo/trainer/tensorboard_hook.h>
#include <colo/trainer/trainer.h>
#include <colo/files/files.h>
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <stdexcept>
#include <utility>
#include <variant>
#include <vector>

#ifdef COLO_HAS_TENSORBOARD
#include "tensorboard/event_file.h"
#else
namespace colo::detail {
// No event files without protobuf: the constructor refuses before one would be opened. The type
// is complete only so that the hook's unique_ptr member can be destroyed.
class TensorBoardEventFile {};
}  // namespace colo::detail
#endif

namespace colo {

#ifdef COLO_HAS_TENSORBOARD
TensorBoardHook::TensorBoardHook(const std::string& dir, TensorBoardOptions options) : options_(std::move(options)) {
  if (dir.empty()) throw std::invalid_argument("TensorBoardHook: the log directory's name is empty");
  if (options_.every_rank()) {
    const std::string rank = fmt::format("rank{}", options_.rank());
    file_ = std::make_unique<detail::TensorBoardEventFile>(files::join(dir, rank), "." + rank);
  } else if (options_.rank() == 0) {
    file_ = std::make_unique<detail::TensorBoardEventFile>(dir, "");
  }
}
bool TensorBoardHook::available() { return true; }
#else
TensorBoardHook::TensorBoardHook(const std::string& dir, TensorBoardOptions options) : options_(std::move(options)) {
  throw TensorBoardError(fmt::format(
      "TensorBoard log directory {}: this build of colo writes no TensorBoard files: protobuf was not found when it "
      "was configured (Debian: apt-get install libprotobuf-dev protobuf-compiler, then configure again)",
      dir));
}
bool TensorBoardHook::available() { return false; }
#endif

TensorBoardHook::~TensorBoardHook() = default;

std::string TensorBoardHook::path() const {
#ifdef COLO_HAS_TENSORBOARD
  if (file_) return file_->path();
#endif
  return "";
}

void TensorBoardHook::before_fit(Trainer& trainer) {
  if (trainer.rank() != options_.rank()) {
    throw std::invalid_argument(fmt::format(
        "TensorBoardHook was built for rank {} but runs on rank {}: build it with TensorBoardOptions().rank(rank)",
        options_.rank(), trainer.rank()));
  }
}

void TensorBoardHook::report(Trainer&, const Record& record) {
#ifdef COLO_HAS_TENSORBOARD
  if (!file_) return;
  const std::string event = record.text_of("event");
  std::vector<std::pair<std::string, double>> scalars;
  for (const auto& [key, value] : record.values()) {
    if (key == "step" || std::holds_alternative<std::string>(value)) continue;  // the x axis; words
    const double number = record.number(key);
    if (!std::isnan(number)) scalars.emplace_back(event + "/" + key, number);
  }
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  file_->write_scalars(static_cast<int64_t>(record.number("step")), scalars, now);
#else
  (void)record;
#endif
}

}  // namespace colo
