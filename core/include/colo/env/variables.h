#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

// Every environment variable colo reads goes through these few readers, so that each one is
// checked alike: a number is a whole decimal string inside a stated range, and a bad value is an
// error that names the variable, its value and what would do, never a silent default or a
// misleading failure later on (COLO_TIMEOUT_MS=10abc once meant 10 ms; =0 a store that rank 0
// itself "could not reach").
//
// An empty value counts as unset, as the shell's `VAR= program` idiom expects.
//
// No LibTorch: colo-run (the launcher, which must start anywhere) reads its variables here too;
// the readers are compiled into libcolo_core and colo-run alike, with colo::files.
namespace colo::env {

// A variable that is set to something unusable. A std::invalid_argument, like every other
// "your input is wrong" error in colo; its own type so that a program can tell a bad
// environment from, say, a bad plugin option.
class VariableError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Looks a variable up: std::getenv by default; tests pass a map.
using Lookup = std::function<const char*(const char*)>;
const Lookup& process_environment();

// The value, or nullopt when unset or empty.
std::optional<std::string> text(const char* name, const Lookup& lookup = process_environment());

// A whole decimal integer (an optional sign, then digits, nothing else: no spaces, no units, no
// "10abc") in [min, max]; nullopt when unset or empty. `meaning` says what the number counts,
// for the error ("milliseconds", "a rank"). Throws VariableError.
std::optional<long long> integer(const char* name, long long min, long long max, const char* meaning,
                                 const Lookup& lookup = process_environment());

// COLO_TIMEOUT_MS: how long a collective (and the rendezvous) waits, in whole milliseconds from 1
// to kMaxTimeoutMs (a week); nullopt when unset or empty. colo-run reads it too: a rank that stays
// stopped (SIGSTOP) that long is named as the job's cause.
inline constexpr long long kMaxTimeoutMs = 7LL * 24 * 3600 * 1000;
std::optional<long long> timeout_ms(const Lookup& lookup = process_environment());
// The timeout where COLO_TIMEOUT_MS is unset: the world group PluginRegistry::default_context
// makes (train_vit's), and colo-run's watch over stopped ranks.
inline constexpr long long kDefaultTimeoutMs = 5LL * 60 * 1000;

// The shortest COLO_JOB_TOKEN colo takes, in characters (colo-run makes 64 hexadecimal digits,
// 256 random bits; 32 characters leave a hand-made token at least 128 bits of hexadecimal).
inline constexpr std::size_t kMinJobTokenLength = 32;

// A secret (COLO_JOB_TOKEN): at least `min_length` printable ASCII characters without spaces;
// nullopt when unset or empty. The error never repeats the value.
std::optional<std::string> secret(const char* name, std::size_t min_length,
                                  const Lookup& lookup = process_environment());

}  // namespace colo::env
