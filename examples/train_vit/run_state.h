// Where a train_vit run's state comes from (--resume) and goes (--save), and what a saved state
// records of the run that wrote it (train_vit.json beside the Booster's files).
#pragma once

#include <colo/booster/state_directory.h>
#include <colo/data/dataset.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "train_options.h"

namespace train_vit {

constexpr const char* kRunRecordFile = "train_vit.json";

// The state --resume designates, and the record of the run that saved it.
struct ResumedState {
  std::string directory;  // StateDirectory::resolve's answer
  nlohmann::json record;  // the saved train_vit.json; null when another program saved the state
};

// Throws std::runtime_error when `resume_dir` holds no state, UsageError when its record is damaged.
ResumedState find_resumed_state(const std::string& resume_dir);

// --resume auto, before the rendezvous: the latest complete state in --save's directory when it is
// this run's (its train_vit.json records the settings of this command line, `world_size` ranks
// and --init's weights), nullopt when the directory holds no complete state (a fresh start), or
// with --overwrite when the state is another run's (which this run then replaces). Throws
// UsageError when the state is another run's, naming what differs and the ways out.
std::optional<ResumedState> find_own_state(const TrainOptions& o, int world_size);

// What the run's weights started from: --init, or for a resumed run what the saved run recorded
// (--init and --resume do not go together: the saved weights replace any others).
struct RunOrigin {
  std::string init;  // --init, resolved; empty when trained from scratch
  // The pretrained weights' normalisation, which an image folder is read with; none: ImageNet's.
  std::optional<colo::data::Normalization> normalization;
};

// A resumed run's origin: the saved run's. A state saved before train_vit recorded the
// normalisation gets it from the saved --init's directory again; `notes` get what the user must
// know when that cannot be done.
RunOrigin resumed_origin(const TrainOptions& o, const ResumedState& saved, std::vector<std::string>& notes);

nlohmann::json run_record(const TrainOptions& o, int world_size, const RunOrigin& origin);

// Options that give a saved data position another meaning make --resume an error (UsageError);
// other changes (a longer schedule, another learning rate, another number of ranks) are allowed
// and returned as notes for the user, as the run is then no longer the saved one's exact
// continuation.
std::vector<std::string> check_resume(const TrainOptions& o, int world_size, const RunOrigin& origin,
                                      const ResumedState& saved);

// --save, on rank 0 at start-up: the directory created, probed and locked for this run, refused
// when it holds another run's states (unless --overwrite, or --resume from it). Throws UsageError
// naming --save and what to do.
std::shared_ptr<colo::StateDirectory> open_save_directory(const TrainOptions& o,
                                                          const std::optional<ResumedState>& resumed);

}  // namespace train_vit
