#include <colo/booster/memory_plan.h>
#include <colo/booster/plugin_registry.h>

#include <colo/booster/plugin_info.h>
#include <colo/dist/device.h>
#include <colo/dist/environment.h>
#include <colo/dist/process_group.h>

#include <colo/booster/closest_match.h>

#include <colo/env/variables.h>
#include <colo/files/files.h>

#include "shared_library.h"

#include <cxxabi.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>


namespace colo {

struct PluginRegistry::LoadedPlugin {
  explicit LoadedPlugin(const std::string& path) : library(path) {}
  detail::SharedLibrary library;
  const PluginInfo* info = nullptr;
};

namespace {

constexpr const char* kFilePrefix = "libcolo_plugin_";
constexpr const char* kFileSuffix = ".so";

struct SearchDir {
  std::string path;
  std::string origin;  // why it is searched, for error messages
};

std::vector<SearchDir> search_dirs() {
  std::vector<SearchDir> dirs;
  if (const std::optional<std::string> path = env::text("COLO_PLUGIN_PATH")) {
    const std::string& list = *path;
    std::size_t start = 0;
    while (start <= list.size()) {
      const std::size_t colon = std::min(list.find(':', start), list.size());
      if (colon > start) dirs.push_back({files::absolute(list.substr(start, colon - start)), "COLO_PLUGIN_PATH"});
      start = colon + 1;
    }
  }
  // Where `cmake --install` puts plugins: relative to this library, so that an installed tree
  // can be moved.
  const std::string booster = detail::shared_object_containing(reinterpret_cast<const void*>(&search_dirs));
  dirs.push_back({files::join(files::parent_path(booster), COLO_PLUGIN_INSTALL_SUBDIR), "installed plugins"});
  dirs.push_back({COLO_PLUGIN_BUILD_DIR, "build tree"});

  // In the build tree the installed-layout directory is the build directory itself.
  std::vector<SearchDir> unique;
  std::set<std::string> seen;
  for (auto& dir : dirs) {
    if (seen.insert(files::canonical_or_absolute(dir.path)).second) unique.push_back(std::move(dir));
  }
  return unique;
}

bool is_path(const std::string& name_or_path) {
  const std::string suffix = kFileSuffix;
  return name_or_path.find('/') != std::string::npos ||
         (name_or_path.size() >= suffix.size() &&
          name_or_path.compare(name_or_path.size() - suffix.size(), suffix.size(), suffix) == 0);
}

std::string file_name_for(const std::string& name) { return kFilePrefix + name + kFileSuffix; }

// "libcolo_plugin_torch_ddp.so" -> "torch_ddp"; empty for other files.
std::string name_from_file(const std::string& file) {
  const std::string prefix = kFilePrefix, suffix = kFileSuffix;
  if (file.size() <= prefix.size() + suffix.size() || file.compare(0, prefix.size(), prefix) != 0 ||
      file.compare(file.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return "";
  }
  return file.substr(prefix.size(), file.size() - prefix.size() - suffix.size());
}

std::string demangle(const std::string& symbol) {
  int status = 0;
  char* readable = abi::__cxa_demangle(symbol.c_str(), nullptr, nullptr, &status);
  if (status != 0 || !readable) return symbol;
  std::string out = readable;
  std::free(readable);
  return out;
}

// The loader's text (dlerror) tells the user what is wrong; add what to do about the common cases.
std::string load_failure_message(const std::string& path, const std::string& reason) {
  std::string hint;
  if (const auto at = reason.find("undefined symbol: "); at != std::string::npos) {
    const std::string symbol = reason.substr(at + std::strlen("undefined symbol: "));
    hint = fmt::format(" [{}]; it was built against another version of colo or LibTorch: rebuild it against this one",
                       demangle(symbol));
  } else if (reason.find("cannot open shared object file") != std::string::npos) {
    hint =
        "; a library it depends on cannot be found: install it, or add its directory to LD_LIBRARY_PATH "
        "(`ldd` on the plugin lists what is missing)";
  } else if (reason.find("invalid ELF header") != std::string::npos ||
             reason.find("file too short") != std::string::npos) {
    hint = "; the file is not a shared library";
  }
  return fmt::format("plugin file '{}' exists but cannot be loaded: {}{}", path, reason, hint);
}

// A job of one has no peers to meet: a FileStore in a private temporary file needs no network
// port, so single-process programs and tests never race for one.
std::string private_store_file() {
  static std::string path;
  std::string pattern = files::join(files::temp_directory(), "colo-world-XXXXXX");
  const int fd = ::mkstemp(pattern.data());
  if (fd < 0) {
    throw std::runtime_error(fmt::format("cannot create the rendezvous file {} for a single-process job: {}", pattern,
                                         std::strerror(errno)));
  }
  ::close(fd);
  path = pattern;
  // The world group lives until the process ends, so the file can only go then.
  std::atexit([] { std::remove(path.c_str()); });
  return path;
}

// The registry is never destroyed (see global()), so without this its world group, and with it
// NCCL's watchdog threads, would live on while the process exits and the CUDA runtime and
// LibTorch's statics are torn down beneath them. Registered after CUDA and the group started, so
// it runs before their own exit handlers. Plugins may still hold the group: it is closed, not
// destroyed.
void close_at_exit(dist::ProcessGroup* world) {
  static dist::ProcessGroup* to_close = nullptr;
  to_close = world;
  std::atexit([] { to_close->close(); });
}

}  // namespace

PluginRegistry& PluginRegistry::global() {
  // Leaked on purpose: plugin libraries must outlive every object they created, static ones
  // included, so nothing here may run at exit.
  static PluginRegistry* registry = new PluginRegistry();
  return *registry;
}

std::vector<std::string> PluginRegistry::search_path() const {
  std::vector<std::string> out;
  for (const auto& dir : search_dirs()) out.push_back(dir.path);
  return out;
}

const PluginInfo& PluginRegistry::open_locked(const std::string& path, const std::string& expected_name) const {
  const std::string key = files::canonical_or_absolute(path);
  auto cached = loaded_.find(key);
  const PluginInfo* info = cached == loaded_.end() ? nullptr : cached->second->info;

  if (!info) {
    std::shared_ptr<LoadedPlugin> loaded;
    try {
      // RTLD_NOW: a missing symbol is reported here, with the file's name, not as a crash later.
      loaded = std::make_shared<LoadedPlugin>(path);
    } catch (const std::runtime_error& e) {
      throw PluginError(load_failure_message(path, e.what()));
    }
    // COLO_PLUGIN exports it through BOOST_DLL_ALIAS: a pointer to the plugin's info() function.
    void* const alias = loaded->library.symbol("colo_plugin_info");
    if (alias == nullptr) {
      throw PluginError(fmt::format(
          "'{}' is not a colo plugin: it does not export colo_plugin_info; build it with colo_add_plugin() and "
          "declare the plugin class with COLO_PLUGIN(...) (colo/booster/plugin_info.h)",
          path));
    }
    info = (*static_cast<const PluginInfo* (**)()>(alias))();
    // api_version is read before anything else: the rest of the struct is only meaningful when
    // it matches.
    if (!info) throw PluginError(fmt::format("plugin '{}': colo_plugin_info returned no information", path));
    if (info->api_version != kPluginApiVersion) {
      throw PluginError(
          fmt::format("plugin '{}' was built for colo plugin API version {}, but this colo has plugin API version {}; "
                      "rebuild the plugin against this colo",
                      path, info->api_version, kPluginApiVersion));
    }
    if (!info->torch_version || std::strcmp(info->torch_version, TORCH_VERSION) != 0) {
      throw PluginError(fmt::format(
          "plugin '{}' was built against LibTorch {}, but colo runs LibTorch {}; rebuild the plugin against "
          "LibTorch {} (LibTorch has no stable C++ ABI across versions)",
          path, info->torch_version ? info->torch_version : "(unknown)", TORCH_VERSION, TORCH_VERSION));
    }
    if (!info->name || !info->version || !info->create) {
      throw PluginError(
          fmt::format("plugin '{}': colo_plugin_info is incomplete (name, version or factory "
                      "missing); declare the plugin with COLO_PLUGIN(...)",
                      path));
    }
    loaded->info = info;
    loaded_[key] = std::move(loaded);
  }

  if (!expected_name.empty() && expected_name != info->name) {
    throw PluginError(fmt::format(
        "'{}' declares plugin '{}', but its file name says '{}'; the name given to COLO_PLUGIN(...) must match "
        "the one given to colo_add_plugin()",
        path, info->name, expected_name));
  }
  return *info;
}

std::vector<PluginListing> PluginRegistry::scan_locked(std::vector<std::string>* problems) const {
  std::vector<PluginListing> out;
  std::set<std::string> names;
  for (const auto& dir : search_dirs()) {
    std::vector<std::string> plugin_files;
    if (files::is_directory(dir.path)) {
      try {
        for (auto& file : files::list_directory(dir.path)) {  // sorted
          if (!name_from_file(file).empty()) plugin_files.push_back(std::move(file));
        }
      } catch (const std::runtime_error&) {
        // An unreadable directory on the search path holds no plugin we can load.
      }
    }
    for (const auto& file : plugin_files) {
      const std::string name = name_from_file(file);
      if (!names.insert(name).second) continue;  // shadowed by an earlier directory
      const std::string path = files::join(dir.path, file);
      try {
        const PluginInfo& info = open_locked(path, name);
        out.push_back({info.name, path, info.version});
      } catch (const PluginError& e) {
        if (problems) problems->push_back(e.what());
      }
    }
  }
  return out;
}

std::vector<PluginListing> PluginRegistry::available() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return scan_locked(nullptr);
}

const PluginInfo& PluginRegistry::load_locked(const std::string& name_or_path) const {
  if (is_path(name_or_path)) {
    const std::string path = files::absolute(name_or_path);
    if (!files::exists(path)) {
      throw PluginError(
          fmt::format("plugin file '{}' does not exist; pass the path of an existing "
                      "libcolo_plugin_<name>.so, or a plugin name",
                      path));
    }
    return open_locked(path, "");
  }

  const auto dirs = search_dirs();
  for (const auto& dir : dirs) {
    const std::string candidate = files::join(dir.path, file_name_for(name_or_path));
    if (files::exists(candidate)) return open_locked(candidate, name_or_path);
  }

  std::vector<std::string> problems;
  const auto found = scan_locked(&problems);
  std::string message = fmt::format("plugin '{}' not found: no {} in", name_or_path, file_name_for(name_or_path));
  for (const auto& dir : dirs) {
    message += fmt::format("\n  {} ({}{})", dir.path, dir.origin, files::is_directory(dir.path) ? "" : ", missing");
  }
  std::vector<std::string> names;
  if (found.empty()) {
    message += "\nno plugins found on the search path";
  } else {
    message += "\navailable plugins:";
    for (const auto& p : found) {
      message += fmt::format("\n  {} {} ({})", p.name, p.version, p.path);
      names.push_back(p.name);
    }
  }
  for (const auto& problem : problems) message += "\nunusable: " + problem;
  if (auto guess = closest_match(name_or_path, names)) message += fmt::format("\ndid you mean '{}'?", *guess);
  message += fmt::format(
      "\nset COLO_PLUGIN_PATH to the directory that holds {}, or pass the path of the .so instead of a name",
      file_name_for(name_or_path));
  throw PluginError(message);
}

PluginContext PluginRegistry::default_context() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!default_context_) {
    auto env = dist::Environment::from_env();
    if (env.world_size == 1 && env.rdzv_file.empty()) env.rdzv_file = private_store_file();
    dist::ProcessGroup::Options options;
    options.timeout = env.timeout.value_or(std::chrono::milliseconds(env::kDefaultTimeoutMs));
    auto context = std::make_shared<PluginContext>();
    // The device first: NCCL binds a communicator to the device current at creation.
    context->device = dist::select_device(env);
    context->world = dist::init_world(env, options);
    close_at_exit(context->world.get());
    default_context_ = std::move(context);
  }
  return *default_context_;
}

MemoryPlan PluginRegistry::plan_memory(const std::string& name_or_path, const PluginOptions& options,
                                       const MemoryPlanInputs& inputs) const {
  const PluginInfo* info = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    info = &load_locked(name_or_path);
  }
  if (!info->plan_memory) {
    throw PluginError(fmt::format("plugin '{}' makes no memory plan (its class has no static plan_memory; see "
                                  "colo/booster/plugin_info.h)",
                                  info->name));
  }
  return info->plan_memory(options, inputs);
}

std::shared_ptr<Plugin> PluginRegistry::create(const std::string& name_or_path, const PluginOptions& options) {
  // Find and check the plugin before the rendezvous: a typo must not wait for other ranks.
  {
    std::lock_guard<std::mutex> lock(mutex_);
    load_locked(name_or_path);
  }
  return create(name_or_path, options, default_context());
}

std::shared_ptr<Plugin> PluginRegistry::create(const std::string& name_or_path, const PluginOptions& options,
                                               const PluginContext& context) {
  const PluginInfo* info = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    info = &load_locked(name_or_path);
  }
  // The plugin's constructor validates its options; its std::invalid_argument reaches the
  // caller unchanged.
  return std::shared_ptr<Plugin>(info->create(options, context));
}

}  // namespace colo
