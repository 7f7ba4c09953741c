#include <colo/data/dataset.h>

#include <cstdlib>

namespace colo::data {

std::string default_data_root() {
  const char* dir = std::getenv("COLO_DATA_DIR");
  if (dir != nullptr && *dir != '\0') return dir;
  return "/usr/share/datasets";
}

const char* to_string(Split split) { return split == Split::kTrain ? "train" : "test"; }

}  // namespace colo::data
