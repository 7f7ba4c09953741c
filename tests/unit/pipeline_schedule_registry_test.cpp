// Schedules by name (core/pipeline/schedule_registry.h): the built-ins and what their entries say,
// the lookups that replace a closed enum, each schedule's shape rules, and a registry of one's own.
#include <colo/pipeline/schedule_generators.h>
#include <colo/pipeline/schedule_registry.h>
#include <colo/pipeline/simulator.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "error_of.h"

namespace colo::pipeline {
namespace {

using colo::testing::error_of;

std::vector<std::string> texts_of(const Schedule& schedule) {
  std::vector<std::string> out;
  for (const auto& actions : schedule.actions) out.push_back(format_actions(actions));
  return out;
}

// An entry that makes 1F1B under another name (for registries of the tests' own).
ScheduleEntry renamed_one_f_one_b(const std::string& name, bool chunks = false) {
  ScheduleEntry entry;
  entry.name = name;
  entry.description = "1F1B under another name";
  entry.generate = one_f_one_b_schedule;
  entry.supports_chunks = chunks;
  return entry;
}

TEST(PipelineScheduleRegistry, HoldsTheBuiltInsInOrderWithWhatTheyNeed) {
  const auto& schedules = builtin_schedules();
  EXPECT_EQ(schedules.names(), (std::vector<std::string>{"gpipe", "1f1b", "interleaved", "zero_bubble"}));
  for (const auto& entry : schedules.entries()) {
    SCOPED_TRACE(entry.name);
    EXPECT_FALSE(entry.description.empty());
    EXPECT_EQ(entry.splits_backward, entry.name == "zero_bubble");
    EXPECT_EQ(entry.supports_chunks, entry.name == "interleaved");
    // What the entry says is what its generator does, for a shape every schedule takes.
    const auto schedule = schedules.make(entry.name, ScheduleShape(2, 4).chunks(entry.supports_chunks ? 2 : 1));
    EXPECT_EQ(schedule.split_backward, entry.splits_backward);
    EXPECT_NO_THROW(simulate(schedule));
  }
  EXPECT_EQ(&builtin_schedules(), &schedules) << "made once";
}

TEST(PipelineScheduleRegistry, LooksUpExactNamesAndAnUnknownOneListsTheValid) {
  const auto& schedules = builtin_schedules();
  ASSERT_NE(schedules.find("1f1b"), nullptr);
  EXPECT_EQ(schedules.find("1f1b")->name, "1f1b");
  EXPECT_EQ(&schedules.at("zero_bubble"), schedules.find("zero_bubble"));
  for (const char* unknown : {"zb", "", "1F1B", "1f1b ", "gpipe,1f1b"}) {
    SCOPED_TRACE(unknown);
    EXPECT_EQ(schedules.find(unknown), nullptr);
    const auto message = error_of<std::invalid_argument>([&] { schedules.at(unknown); });
    EXPECT_NE(message.find(std::string("unknown pipeline schedule '") + unknown + "'"), std::string::npos) << message;
    EXPECT_NE(message.find("use one of gpipe, 1f1b, interleaved, zero_bubble"), std::string::npos) << message;
  }
  EXPECT_THROW(schedules.make("zb", ScheduleShape(2, 4)), std::invalid_argument);
  EXPECT_THROW(schedules.shape_problems("zb", ScheduleShape(2, 4)), std::invalid_argument);
}

TEST(PipelineScheduleRegistry, MakeRunsTheGeneratorOfTheName) {
  const auto& schedules = builtin_schedules();
  const ScheduleShape shape = ScheduleShape(2, 4);
  EXPECT_EQ(texts_of(schedules.make("gpipe", shape)), texts_of(gpipe_schedule(shape)));
  EXPECT_EQ(texts_of(schedules.make("1f1b", shape)), texts_of(one_f_one_b_schedule(shape)));
  EXPECT_EQ(texts_of(schedules.make("zero_bubble", shape)), texts_of(zero_bubble_h1_schedule(shape)));
  const ScheduleShape chunked = ScheduleShape(2, 4).chunks(3);
  EXPECT_EQ(texts_of(schedules.make("interleaved", chunked)), texts_of(interleaved_schedule(chunked)));
  // Not every name makes the same schedule.
  EXPECT_NE(texts_of(schedules.make("gpipe", shape)), texts_of(schedules.make("1f1b", shape)));
}

TEST(PipelineScheduleRegistry, BadShapesListEveryProblem) {
  const auto& schedules = builtin_schedules();
  // Interleaved with one rank, one chunk and 3 microbatches: two problems at once.
  const auto message =
      error_of<std::invalid_argument>([&] { schedules.make("interleaved", ScheduleShape(1, 3).chunks(1)); });
  EXPECT_NE(message.find("cannot make a interleaved pipeline schedule for pp=1, microbatches=3, chunks=1"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("needs pp >= 2"), std::string::npos) << message;
  EXPECT_NE(message.find("needs chunks >= 2"), std::string::npos) << message;
  EXPECT_EQ(message.find("multiple of pp"), std::string::npos) << message;  // 3 is a multiple of 1
  const auto not_multiple = schedules.shape_problems("interleaved", ScheduleShape(4, 6).chunks(2));
  ASSERT_EQ(not_multiple.size(), 1u);
  EXPECT_NE(not_multiple[0].find("multiple of pp=4, got 6: use 4 or 8"), std::string::npos) << not_multiple[0];
  EXPECT_NE(schedules.shape_problems("interleaved", ScheduleShape(4, 2).chunks(2))[0].find("use 4"),
            std::string::npos);
  // The multiple at its boundary: m = pp - 1, pp, pp + 1.
  EXPECT_EQ(schedules.shape_problems("interleaved", ScheduleShape(4, 3).chunks(2)).size(), 1u);
  EXPECT_TRUE(schedules.shape_problems("interleaved", ScheduleShape(4, 4).chunks(2)).empty());
  EXPECT_EQ(schedules.shape_problems("interleaved", ScheduleShape(4, 5).chunks(2)).size(), 1u);

  // Chunks on a schedule of one chunk per rank: the hint names the registry's chunked schedules.
  const auto chunked = error_of<std::invalid_argument>([&] { schedules.make("1f1b", ScheduleShape(2, 4).chunks(2)); });
  EXPECT_NE(chunked.find("chunks=2 needs the interleaved schedule (1f1b runs one model chunk per rank): set chunks=1 "
                         "or use interleaved"),
            std::string::npos)
      << chunked;

  const auto problems = schedules.shape_problems("gpipe", ScheduleShape(0, -1).chunks(0));
  EXPECT_EQ(problems.size(), 3u);
  EXPECT_TRUE(schedules.shape_problems("zero_bubble", ScheduleShape(1, 1)).empty());
}

TEST(PipelineScheduleRegistry, ARegistryOfOnesOwnTakesNewSchedules) {
  ScheduleRegistry registry;
  EXPECT_TRUE(registry.names().empty());
  register_builtin_schedules(registry);
  registry.add(renamed_one_f_one_b("mine"));
  EXPECT_EQ(registry.names(), (std::vector<std::string>{"gpipe", "1f1b", "interleaved", "zero_bubble", "mine"}));
  EXPECT_EQ(texts_of(registry.make("mine", ScheduleShape(3, 5))), texts_of(one_f_one_b_schedule(ScheduleShape(3, 5))));
  EXPECT_NE(error_of<std::invalid_argument>([&] { registry.at("yours"); })
                .find("use one of gpipe, 1f1b, interleaved, zero_bubble, mine"),
            std::string::npos);
  EXPECT_EQ(builtin_schedules().find("mine"), nullptr) << "the built-in registry is not changed";

  // The chunk hint lists every schedule that supports chunks.
  registry.add(renamed_one_f_one_b("chunky", /*chunks=*/true));
  const auto problems = registry.shape_problems("mine", ScheduleShape(2, 4).chunks(2));
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("needs the interleaved or chunky schedule"), std::string::npos) << problems[0];
}

TEST(PipelineScheduleRegistry, RefusesBadEntries) {
  ScheduleRegistry registry;
  registry.add(renamed_one_f_one_b("a_1"));
  for (const char* bad : {"", "A", "1F1B", "a-b", "a b"}) {
    SCOPED_TRACE(bad);
    const auto message = error_of<std::invalid_argument>([&] { registry.add(renamed_one_f_one_b(bad)); });
    EXPECT_NE(message.find("is not a schedule name"), std::string::npos) << message;
  }
  EXPECT_NE(error_of<std::invalid_argument>([&] { registry.add(renamed_one_f_one_b("a_1")); })
                .find("'a_1' is registered already"),
            std::string::npos);
  ScheduleEntry empty = renamed_one_f_one_b("empty");
  empty.generate = nullptr;
  EXPECT_NE(error_of<std::invalid_argument>([&] { registry.add(empty); }).find("has no generator"), std::string::npos);
  EXPECT_EQ(registry.names(), (std::vector<std::string>{"a_1"}));
}

// An entry's own rules are asked only for shapes that keep the basic rules (a rule may divide by
// pp), and an entry must say truly whether its generator splits the backward.
TEST(PipelineScheduleRegistry, EntryRulesAndClaimsAreHeldToTheirWord) {
  ScheduleRegistry registry;
  ScheduleEntry picky = renamed_one_f_one_b("picky");
  int asked = 0;
  picky.shape_rules = [&asked](const ScheduleShape& shape) {
    ++asked;
    return shape.microbatches() % shape.pp() == 0 ? std::vector<std::string>{}
                                                  : std::vector<std::string>{"microbatches must be a multiple of pp"};
  };
  registry.add(picky);
  EXPECT_EQ(registry.shape_problems("picky", ScheduleShape(0, 4)).size(), 1u);
  EXPECT_EQ(asked, 0);
  EXPECT_EQ(registry.shape_problems("picky", ScheduleShape(2, 3)),
            (std::vector<std::string>{"microbatches must be a multiple of pp"}));
  EXPECT_EQ(asked, 1);
  EXPECT_THROW(registry.make("picky", ScheduleShape(2, 3)), std::invalid_argument);

  ScheduleEntry liar = renamed_one_f_one_b("liar");
  liar.splits_backward = true;  // 1F1B does not
  registry.add(liar);
  const auto message = error_of<std::logic_error>([&] { registry.make("liar", ScheduleShape(2, 4)); });
  EXPECT_NE(message.find("generator does not split the backward, but its entry says it does"), std::string::npos)
      << message;
}

}  // namespace
}  // namespace colo::pipeline
