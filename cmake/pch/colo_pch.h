// The precompiled header every colo target reuses: LibTorch is most of every translation
// unit's compile time, and parsing it once per build instead of once per file is the largest
// saving on a 2-core machine.
#pragma once
#include <torch/torch.h>

#include <fmt/format.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>
