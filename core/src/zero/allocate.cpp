#include <colo/zero/allocate.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <new>
#include <stdexcept>

namespace colo::zero {

std::string format_bytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024.0 * 1024.0 * 1024.0) return fmt::format("{:.2f} TiB", b / (1024.0 * 1024.0 * 1024.0 * 1024.0));
  if (b >= 1024.0 * 1024.0 * 1024.0) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024.0 * 1024.0));
  if (b >= 1024.0 * 1024.0) return fmt::format("{:.2f} MiB", b / (1024.0 * 1024.0));
  if (b >= 1024.0) return fmt::format("{:.2f} KiB", b / 1024.0);
  return fmt::format("{} B", bytes);
}

torch::Tensor allocate(int64_t numel, const torch::TensorOptions& options, const std::string& what,
                       const std::string& hint) {
  const auto fail = [&](const std::string& cause) {
    const int64_t bytes = numel * static_cast<int64_t>(c10::elementSize(c10::typeMetaToScalarType(options.dtype())));
    const std::string where = options.device().is_cuda() ? fmt::format("GPU memory ({})", options.device().str())
                              : options.pinned_memory()  ? "pinned host memory"
                                                         : "host memory";
    return AllocationError(fmt::format("could not allocate {} of {} for {}: {}. {}", format_bytes(bytes), where, what,
                                       cause.substr(0, cause.find('\n')), hint));
  };
  try {
    return torch::empty({numel}, options);
  } catch (const c10::Error& e) {
    throw fail(e.what_without_backtrace());
  } catch (const std::bad_alloc& e) {
    throw fail(e.what());
  }
}

}  // namespace colo::zero
