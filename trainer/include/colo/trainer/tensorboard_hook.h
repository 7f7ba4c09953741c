#pragma once

#include <colo/trainer/trainer_hook.h>

#include <torch/arg.h>

#include <memory>
#include <stdexcept>
#include <string>

namespace colo::detail {
class TensorBoardEventFile;
}

namespace colo {

// A TensorBoard log directory that cannot be used (it cannot be created, or a file cannot be
// written there), or a colo built without TensorBoard support. The message names the directory.
class TensorBoardError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TensorBoardOptions {
  // This process's rank in the Trainer's world (the hook checks it in before_fit): it decides
  // whether this rank writes, and names its file.
  TORCH_ARG(int, rank) = 0;
  // false: rank 0 writes DIR/events.out.tfevents.*, the other ranks nothing. true: every rank
  // writes its own file, DIR/rank<R>/events.out.tfevents.*.rank<R>: a run of its own in
  // TensorBoard (files of one directory are one run, read one after the other).
  TORCH_ARG(bool, every_rank) = false;
};

// Writes every record as TensorBoard scalars (train_vit's --tensorboard DIR): one event per
// record at the record's "step", a scalar per numeric field tagged "<event>/<field>" ("train/loss",
// "train/lr", "train/images_per_s", "train/mfu", "eval/loss", "eval/top1", ...: whatever the other
// hooks put in the records), stamped with the time it was written; a NaN field ("no value") is left
// out. The file is created on construction (TensorBoardError naming the directory when it cannot
// be), so that a bad directory stops a program at start-up; each event reaches the file as it is
// written. The event format is protobuf's (Debian's libprotobuf), framed as TFRecords.
class TensorBoardHook : public TrainerHook {
 public:
  TensorBoardHook(const std::string& dir, TensorBoardOptions options = {});
  ~TensorBoardHook() override;
  // Whether this build of colo writes TensorBoard files (protobuf was found when it was configured).
  static bool available();
  // The file this rank writes; empty on a rank that writes none.
  std::string path() const;

  void before_fit(Trainer& trainer) override;
  void report(Trainer& trainer, const Record& record) override;

 private:
  TensorBoardOptions options_;
  std::unique_ptr<detail::TensorBoardEventFile> file_;
};

}  // namespace colo
