#include <colo/data/dataset.h>
#include <colo/env/variables.h>

#include <cstdlib>

namespace colo::data {

std::string default_data_root() {
  return env::text("COLO_DATA_DIR").value_or("/usr/share/datasets");
}

const char* to_string(Split split) { return split == Split::kTrain ? "train" : "test"; }

}  // namespace colo::data
