#include <colo/trainer/trainer_hook.h>

#include <cmath>

namespace colo {

double Record::number(const std::string& key) const {
  const auto it = values_.find(key);
  if (it == values_.end()) return NAN;
  if (const auto* i = std::get_if<int64_t>(&it->second)) return static_cast<double>(*i);
  if (const auto* d = std::get_if<double>(&it->second)) return *d;
  return NAN;
}

std::string Record::text_of(const std::string& key) const {
  const auto it = values_.find(key);
  if (it == values_.end()) return {};
  if (const auto* s = std::get_if<std::string>(&it->second)) return *s;
  return {};
}

}  // namespace colo
