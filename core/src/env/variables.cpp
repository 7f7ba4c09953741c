#include <colo/env/variables.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>

namespace colo::env {

const Lookup& process_environment() {
  static const Lookup lookup = [](const char* name) { return std::getenv(name); };
  return lookup;
}

std::optional<std::string> text(const char* name, const Lookup& lookup) {
  const char* raw = lookup(name);
  if (raw == nullptr || *raw == '\0') return std::nullopt;
  return std::string(raw);
}

std::optional<long long> integer(const char* name, long long min, long long max, const char* meaning,
                                 const Lookup& lookup) {
  const std::optional<std::string> value = text(name, lookup);
  if (!value) return std::nullopt;
  const std::string wanted = fmt::format("a whole number of {} from {} to {}", meaning, min, max);
  // strtoll alone would skip leading spaces and stop at the first non-digit ("10abc" -> 10).
  const std::string& s = *value;
  std::size_t digits_from = (s[0] == '-' || s[0] == '+') ? 1 : 0;
  bool digits_only = digits_from < s.size();
  for (std::size_t i = digits_from; i < s.size(); ++i) digits_only = digits_only && s[i] >= '0' && s[i] <= '9';
  if (!digits_only) {
    throw VariableError(fmt::format("environment variable {}='{}' is not a whole number: it must be {}; fix it or "
                                    "unset it",
                                    name, s, wanted));
  }
  errno = 0;
  const long long parsed = std::strtoll(s.c_str(), nullptr, 10);
  if (errno == ERANGE || parsed < min || parsed > max) {
    throw VariableError(fmt::format("environment variable {}={} is out of range: it must be {}; fix it or unset it",
                                    name, s, wanted));
  }
  return parsed;
}

std::optional<long long> timeout_ms(const Lookup& lookup) {
  return integer("COLO_TIMEOUT_MS", 1, kMaxTimeoutMs, "milliseconds", lookup);
}

std::optional<std::string> secret(const char* name, std::size_t min_length, const Lookup& lookup) {
  const std::optional<std::string> value = text(name, lookup);
  if (!value) return std::nullopt;
  bool printable = true;
  for (char c : *value) printable = printable && c > ' ' && c < 0x7f;
  if (!printable || value->size() < min_length) {
    throw VariableError(fmt::format("environment variable {} (its value is not shown) must be at least {} printable "
                                    "characters without spaces; it has {} characters{}",
                                    name, min_length, value->size(), printable ? "" : ", some of them not printable"));
  }
  return value;
}

}  // namespace colo::env
