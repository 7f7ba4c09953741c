// COLO_FAULT and COLO_RESTART_COUNT as the ranks read them (colo/env/fault_injection.h): what a
// fault list means, which fault is due where, and the errors a bad value gets. Firing a fault is
// tested through the programs (colo_run_restart_test.cpp, train_vit_restart_test.cpp).
#include <colo/env/fault_injection.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

namespace {

using colo::env::Fault;
using colo::env::VariableError;

colo::env::Lookup lookup_in(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    const auto found = vars.find(name);
    return found == vars.end() ? nullptr : found->second.c_str();
  };
}

std::string error_of(const std::map<std::string, std::string>& vars) {
  try {
    colo::env::faults(lookup_in(vars));
  } catch (const VariableError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(FaultInjection, UnsetOrEmptyMeansNoFault) {
  EXPECT_TRUE(colo::env::faults(lookup_in({})).empty());
  EXPECT_TRUE(colo::env::faults(lookup_in({{"COLO_FAULT", ""}})).empty());
  EXPECT_EQ(colo::env::restart_count(lookup_in({})), 0);
  EXPECT_FALSE(colo::env::fault_at_step(0, 0, lookup_in({})));
}

TEST(FaultInjection, AListOfFaultsIsReadWithItsRestartCounts) {
  const auto faults = colo::env::faults(
      lookup_in({{"COLO_FAULT", "rank=1,step=3,kind=crash;kind=hang,rank=0,step=12,restart=2;rank=3,kind=nostart"}}));
  ASSERT_EQ(faults.size(), 3u);
  EXPECT_EQ(faults[0].rank, 1);
  EXPECT_EQ(faults[0].step, 3);
  EXPECT_EQ(faults[0].kind, Fault::Kind::kCrash);
  EXPECT_EQ(faults[0].restart, 0);
  EXPECT_EQ(faults[1].rank, 0);
  EXPECT_EQ(faults[1].step, 12);
  EXPECT_EQ(faults[1].kind, Fault::Kind::kHang);
  EXPECT_EQ(faults[1].restart, 2);
  EXPECT_EQ(faults[2].rank, 3);
  EXPECT_EQ(faults[2].kind, Fault::Kind::kNoStart);
}

// A fault is due on its rank, at its step, in its attempt only: one step, rank or restart either
// side of it is not.
TEST(FaultInjection, AFaultIsDueAtItsRankStepAndRestartOnly) {
  const std::string spec = "rank=1,step=3,kind=crash,restart=1";
  for (int rank : {0, 1, 2}) {
    for (long long step : {2, 3, 4}) {
      for (const char* restart : {"0", "1", "2"}) {
        const auto due = colo::env::fault_at_step(
            rank, step, lookup_in({{"COLO_FAULT", spec}, {"COLO_RESTART_COUNT", restart}}));
        EXPECT_EQ(due.has_value(), rank == 1 && step == 3 && std::string(restart) == "1")
            << "rank " << rank << " step " << step << " restart " << restart;
      }
    }
  }
  // Unset COLO_RESTART_COUNT is the first attempt: a fault of restart 0 fires, one of 1 does not.
  EXPECT_TRUE(colo::env::fault_at_step(1, 3, lookup_in({{"COLO_FAULT", "rank=1,step=3,kind=hang"}})));
  EXPECT_FALSE(colo::env::fault_at_step(1, 3, lookup_in({{"COLO_FAULT", spec}})));
  // A nostart fault never fires at a step.
  EXPECT_FALSE(colo::env::fault_at_step(1, 0, lookup_in({{"COLO_FAULT", "rank=1,kind=nostart"}})));
}

TEST(FaultInjection, BadValuesAreRefusedNamingTheVariableAndTheFault) {
  const std::map<std::string, std::string> cases = {
      {"rank=1,step=3", "fault 'rank=1,step=3': kind is missing"},
      {"rank=1,step=3,kind=explode", "kind='explode' is none of crash, hang, nostart"},
      {"step=3,kind=crash", "rank is missing"},
      {"rank=1,kind=crash", "step is missing"},
      {"rank=-1,step=3,kind=crash", "rank='-1' is not a whole number from 0"},
      {"rank=1,step=3x,kind=crash", "step='3x' is not a whole number"},
      {"rank=1,step=3,kind=crash,restart=", "restart='' is not a whole number"},
      {"rank=1,step=3,kind=crash,when=now", "unknown key 'when'"},
      {"rank=1,rank=2,step=3,kind=crash", "'rank' is given twice"},
      {"rank:1,step=3,kind=crash", "'rank:1' is not key=value"},
      {"rank=1,step=2,kind=nostart", "a nostart fault fires before any step: drop step"},
  };
  for (const auto& [value, expected] : cases) {
    const std::string message = error_of({{"COLO_FAULT", value}});
    EXPECT_NE(message.find("environment variable COLO_FAULT"), std::string::npos) << message;
    EXPECT_NE(message.find(expected), std::string::npos) << value << ": " << message;
    EXPECT_NE(message.find("the form is rank=R,step=S,kind=crash|hang|nostart"), std::string::npos) << message;
  }
  // One bad fault in a list spoils the list.
  EXPECT_NE(error_of({{"COLO_FAULT", "rank=0,step=1,kind=crash;rank=0,step=1"}}).find("kind is missing"),
            std::string::npos);
}

TEST(FaultInjection, ABadRestartCountIsRefused) {
  EXPECT_EQ(colo::env::restart_count(lookup_in({{"COLO_RESTART_COUNT", "4"}})), 4);
  EXPECT_THROW(colo::env::restart_count(lookup_in({{"COLO_RESTART_COUNT", "-1"}})), VariableError);
  EXPECT_THROW(colo::env::restart_count(lookup_in({{"COLO_RESTART_COUNT", "one"}})), VariableError);
  // Checked where a fault could be due, so that a typo does not silently disarm it.
  EXPECT_THROW(colo::env::fault_at_step(0, 0,
                                        lookup_in({{"COLO_FAULT", "rank=0,step=0,kind=crash"},
                                                   {"COLO_RESTART_COUNT", "x"}})),
               VariableError);
}

}  // namespace
