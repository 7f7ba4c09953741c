// The Trainer's progress line (booster/src/progress_line.h): the fields a user's hook adds to a
// record are shown after colo's own, and an evaluation outside fit() reads as one, not "epoch 1/0".
#include <colo/booster/trainer_hook.h>
#include <gtest/gtest.h>

#include <string>

#include "progress_line.h"

namespace {

using colo::Record;
using colo::detail::progress_line;
using colo::detail::ProgressPosition;

Record training_record() {
  Record r;
  r.text("event", "train");
  r.integer("epoch", 2);
  r.integer("step", 30);
  r.integer("skipped_steps", 0);
  r.real("grad_norm", 1.5);
  r.real("loss", 2.25);
  r.real("lr", 1e-3);
  r.real("images_per_s", 640.0);
  r.real("elapsed_s", 12.0);
  return r;
}

ProgressPosition in_fit() {
  ProgressPosition at;
  at.epochs = 5;
  at.global_step = 30;
  at.stop_step = 100;
  at.eta_seconds = 70;
  return at;
}

TEST(ProgressLine, AUserHooksFieldsFollowColosOwn) {
  Record r = training_record();
  r.real("grad_noise", 0.125);
  r.integer("tokens", 4096);
  r.text("phase", "warm-up");
  EXPECT_EQ(progress_line(r, in_fit()),
            "epoch 2/5  step 30/100  loss 2.2500  lr 1.000e-03  640 img/s  grad_noise 0.125  phase warm-up  tokens 4096"
            "  ETA 1m10s");
  // colo's own fields that the line leaves to the metrics log stay out of it.
  EXPECT_EQ(progress_line(training_record(), in_fit()), "epoch 2/5  step 30/100  loss 2.2500  lr 1.000e-03  640 img/s"
                                                       "  ETA 1m10s");
}

Record evaluation_record(bool with_epoch) {
  Record r;
  r.text("event", "eval");
  if (with_epoch) r.integer("epoch", 3);
  r.integer("step", 30);
  r.integer("images", 21);
  r.real("top1", 0.5);
  r.real("loss", 1.75);
  r.real("seconds", 0.4);
  r.real("elapsed_s", 12.0);
  return r;
}

TEST(ProgressLine, AnEvaluationInFitNamesItsEpochWithTheUsersFields) {
  Record r = evaluation_record(true);
  r.real("top5", 0.875);
  EXPECT_EQ(progress_line(r, in_fit()), "epoch 3/5  test top-1 50.00%  loss 1.7500  top5 0.875  (0.4 s)");
}

TEST(ProgressLine, AnEvaluationOutsideFitSaysSoAndCountsItsImages) {
  ProgressPosition alone;
  alone.in_fit = false;
  alone.global_step = 30;
  EXPECT_EQ(progress_line(evaluation_record(false), alone),
            "evaluation after step 30: test top-1 50.00%  loss 1.7500  (21 images, 0.4 s)");
  alone.global_step = 0;
  EXPECT_EQ(progress_line(evaluation_record(false), alone),
            "evaluation: test top-1 50.00%  loss 1.7500  (21 images, 0.4 s)");
}

}  // namespace
