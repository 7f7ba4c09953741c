#pragma once

#include <map>
#include <string>
#include <vector>

namespace train_vit {

// --config FILE: a run's layout and recipe in a JSON file (examples/configs/ holds the tutorials'
// layouts), the way the tutorials' config files hold them:
//
//   {"plugin": "hybrid_parallel", "precision": "bf16",
//    "parallel": {"tp": 4, "pp": 4, "microbatches": 4},
//    "model": {"preset": "custom", "hidden": 4096, "depth": 32, "heads": 64, "mlp_ratio": 4},
//    "data": {"dataset": "imagefolder", "dir": "imagenet"},
//    "train": {"epochs": 300, "batch_size": 256},
//    "optimizer": {"name": "adamw", "lr": 3e-3, "weight_decay": 0.3},
//    "schedule": {"warmup_epochs": 32}}
//
// Every key is an option of the command line under another name (config_file.cpp's table), so the
// file is turned into those options and parsed with them: the same checks, the same messages.
// Options given on the command line override the file's (plugin options key by key).

// What a command line with --config FILE amounts to.
struct ExpandedConfig {
  // The arguments to parse: the file's options that the command line does not give, then the
  // command line without its --config.
  std::vector<std::string> args;
  // For the user, printed before the run starts: what of the file was left out and why.
  std::vector<std::string> notes;
  // Each plugin option the file sets, and where ("parallel.pp of FILE"): a plugin that rejects
  // one is then blamed on the file, not on --plugin-opt.
  std::map<std::string, std::string> plugin_option_sources;
};

// Without --config, `command_line` as it is. The file's `parallel` and `plugin_options` sections
// are its plugin's: a --plugin that names another plugin leaves them out (with a note). Throws
// UsageError naming the file and the key for an unreadable file, malformed JSON, a key given twice
// in one object, an unknown key (listing the valid ones, with the closest as a suggestion) or a
// value of the wrong type.
ExpandedConfig expand_config(const std::vector<std::string>& command_line);

// The keys a config file may hold, "section.key" (for --help and the tests).
std::vector<std::string> config_keys();

}  // namespace train_vit
