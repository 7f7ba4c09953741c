#include "run_state.h"

#include <colo/files/files.h>
#include <colo/nn/pretrained.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>

namespace train_vit {

ResumedState find_resumed_state(const std::string& resume_dir) {
  ResumedState state;
  state.directory = colo::StateDirectory::resolve(resume_dir);
  const auto path = colo::files::join(state.directory, kRunRecordFile);
  std::ifstream in(path);
  if (!in) return state;  // saved by another program: the Booster's own checks apply
  try {
    state.record = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(fmt::format("--resume {}: {} is damaged ({}); resume from another saved state",
                                 state.directory, path, e.what()));
  }
  return state;
}

RunOrigin resumed_origin(const TrainOptions& o, const ResumedState& saved, std::vector<std::string>& notes) {
  RunOrigin origin;
  if (!saved.record.is_object()) return origin;
  origin.init = saved.record.value("init", std::string());
  const auto recorded = saved.record.find("init_normalization");
  if (recorded != saved.record.end()) {
    if (recorded->is_object()) {
      origin.normalization = colo::data::Normalization{recorded->at("mean").get<std::vector<double>>(),
                                                       recorded->at("std").get<std::vector<double>>()};
    }
    return origin;
  }
  // Saved by a train_vit that did not record it: the saved --init's directory says it again.
  if (origin.init.empty() || o.dataset != "imagefolder") return origin;
  if (!colo::files::exists(origin.init)) {
    notes.push_back(fmt::format(
        "note: the saved run started from --init {}, which is gone, and its state does not record that weights' "
        "normalisation: the images are normalised with ImageNet's statistics, which may differ",
        origin.init));
    return origin;
  }
  const auto normalization = colo::nn::read_pretrained_normalization(origin.init);
  if (!normalization.mean.empty()) origin.normalization = colo::data::Normalization{normalization.mean, normalization.std};
  return origin;
}

nlohmann::json run_record(const TrainOptions& o, int world_size, const RunOrigin& origin) {
  // The files a data set is read from (resolved: "./photos" and "photos" are one folder); none for
  // synthetic data.
  const std::string data_dir =
      o.dataset == "synthetic" || o.data_dir.empty() ? "" : colo::files::canonical_or_absolute(o.data_dir);
  nlohmann::json normalization = nullptr;
  if (origin.normalization) normalization = {{"mean", origin.normalization->mean}, {"std", origin.normalization->std}};
  nlohmann::json record = {
      {"world_size", world_size},
      {"dataset", o.dataset},
      {"data_dir", data_dir},
      {"init", origin.init},
      {"init_normalization", normalization},
      {"synthetic_samples", o.synthetic_samples},
      {"batch_size", o.batch_size},
      {"grad_accum", o.grad_accum},
      {"seed", o.seed},
      {"augment", o.augment},
      {"mixup",
       fmt::format("mixup {} cutmix {} minmax '{}' prob {} switch {} mode {} off {}", o.mixup_alpha, o.cutmix_alpha,
                   o.cutmix_minmax, o.mixup_prob, o.mixup_switch_prob, o.mixup_mode, o.mixup_off_epoch)},
      {"epochs", o.epochs},
      {"lr", o.lr},
      {"warmup", o.warmup_epochs},
      {"schedule", fmt::format("{} per {} warmup steps {} step {} milestones [{}] gamma {}", o.schedule, o.schedule_per,
                               o.warmup_steps ? std::to_string(*o.warmup_steps) : "-", o.lr_step_epochs,
                               fmt::join(o.lr_milestones, ","), o.lr_gamma)},
      {"optimizer", o.optimizer},
      {"weight_decay", o.weight_decay},
      {"precision", o.precision}};
  // Recorded only when used, so that a state saved before these options existed still matches.
  if (!o.rand_augment.empty() || !o.auto_augment.empty() || o.reprob > 0) {
    record["timm_augment"] =
        fmt::format("rand '{}' auto '{}' reprob {} remode {}", o.rand_augment, o.auto_augment, o.reprob, o.remode);
  }
  return record;
}

std::vector<std::string> check_resume(const TrainOptions& o, int world_size, const RunOrigin& origin,
                                      const ResumedState& saved) {
  if (!saved.record.is_object()) return {};
  const nlohmann::json now = run_record(o, world_size, origin);
  std::vector<std::string> errors, changes;
  for (const auto& [key, value] : now.items()) {
    if (!saved.record.contains(key) || saved.record[key] == value) continue;
    const bool moves_data = key == "dataset" || key == "data_dir" || key == "synthetic_samples" ||
                            key == "batch_size" || key == "grad_accum";
    (moves_data ? errors : changes)
        .push_back(fmt::format("{} {} (saved: {})", key, value.dump(), saved.record[key].dump()));
  }
  if (!errors.empty()) {
    std::string list;
    for (const auto& e : errors) list += "\n  " + e;
    throw UsageError(
        fmt::format("--resume {}: the saved run used other data settings, so its data position means "
                    "nothing here; resume with the saved values:{}",
                    saved.directory, list));
  }
  std::vector<std::string> notes;
  for (const auto& change : changes)
    notes.push_back(fmt::format("note: resuming with {}: not an exact continuation", change));
  return notes;
}

std::optional<ResumedState> find_own_state(const TrainOptions& o, int world_size) {
  // `latest` is published last, atomically: without it DIR holds no complete state (at most what
  // an interrupted first save left, which opening the directory clears).
  if (!colo::files::lexists(colo::files::join(o.save_dir, "latest"))) return std::nullopt;
  ResumedState saved = find_resumed_state(o.save_dir);
  // The saved run's settings against this command line's. The normalisation is left out: it
  // follows from --init, which is compared.
  RunOrigin now;
  if (!o.init.empty()) now.init = colo::files::canonical_or_absolute(o.init);
  nlohmann::json wanted = run_record(o, world_size, now);
  wanted.erase("init_normalization");
  std::vector<std::string> differences;
  if (!saved.record.is_object()) {
    differences.emplace_back(fmt::format("the state has no {} (another program saved it)", kRunRecordFile));
  } else {
    for (const auto& [key, value] : wanted.items()) {
      if (!saved.record.contains(key) || saved.record[key] != value) {
        differences.push_back(fmt::format("{} {} (saved: {})", key, value.dump(),
                                          saved.record.contains(key) ? saved.record[key].dump() : "none"));
      }
    }
  }
  if (differences.empty()) return saved;
  if (o.overwrite) return std::nullopt;
  std::string list;
  for (const auto& d : differences) list += "\n  " + d;
  throw UsageError(fmt::format(
      "--resume auto: --save {} holds the state of another run ({}), not this one's: its settings differ:{}\n"
      "Continue that run on purpose with --resume {}, replace its states with --overwrite, or save into another "
      "directory",
      o.save_dir, saved.directory, list, o.save_dir));
}

std::shared_ptr<colo::StateDirectory> open_save_directory(const TrainOptions& o,
                                                          const std::optional<ResumedState>& resumed) {
  try {
    return std::make_shared<colo::StateDirectory>(o.save_dir, colo::StateDirectoryOptions()
                                                                  .resumed_from(resumed ? resumed->directory : "")
                                                                  .overwrite(o.overwrite)
                                                                  .resume_name("--resume")
                                                                  .overwrite_name("--overwrite"));
  } catch (const colo::StateDirectoryError& e) {
    throw UsageError(fmt::format("--save {}", e.what()));
  }
}

}  // namespace train_vit
