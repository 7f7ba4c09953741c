#include <colo/booster/plugin_options.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <iterator>
#include <set>
#include <stdexcept>
#include <string>

#include "colossalai_option_names.h"

namespace {

using colo::OptionReader;
using colo::PluginOptions;

// The message finish() throws, or "" when it does not throw.
std::string finish_message(const OptionReader& reader) {
  try {
    reader.finish();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(PluginOptions, ParsesAssignments) {
  EXPECT_EQ(colo::parse_option_assignment("tp_size=2"), std::make_pair(std::string("tp_size"), std::string("2")));
  EXPECT_EQ(colo::parse_option_assignment("expr=a=b"), std::make_pair(std::string("expr"), std::string("a=b")));
  EXPECT_EQ(colo::parse_option_assignment("empty="), std::make_pair(std::string("empty"), std::string("")));
  for (const char* bad : {"tp_size", "=2", ""}) {
    try {
      colo::parse_option_assignment(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("must have the form key=value"), std::string::npos) << e.what();
    }
  }
}

TEST(PluginOptions, AbsentKeysGiveDefaultsAndPresentKeysTheirValues) {
  OptionReader reader("p", {{"flag", "on"}, {"count", "-12"}, {"ratio", "2.5e-3"}, {"label", "x y"}, {"mode", "b"}});
  EXPECT_TRUE(reader.get_bool("flag", false, ""));
  EXPECT_EQ(reader.get_int("count", 7, ""), -12);
  EXPECT_DOUBLE_EQ(reader.get_double("ratio", 1.0, ""), 2.5e-3);
  EXPECT_EQ(reader.get_string("label", "none", ""), "x y");
  EXPECT_EQ(reader.get_choice("mode", "a", {"a", "b"}, ""), "b");
  EXPECT_FALSE(reader.get_bool("other_flag", false, ""));
  EXPECT_EQ(reader.get_int("other_count", 7, ""), 7);
  EXPECT_DOUBLE_EQ(reader.get_double("other_ratio", 0.5, ""), 0.5);
  EXPECT_EQ(reader.get_string("other_label", "none", ""), "none");
  EXPECT_EQ(reader.get_choice("other_mode", "a", {"a", "b"}, ""), "a");
  EXPECT_NO_THROW(reader.finish());
}

TEST(PluginOptions, BooleansAcceptTheUsualSpellings) {
  for (const char* yes : {"true", "1", "yes", "on", "TRUE", "On"}) {
    OptionReader reader("p", {{"k", yes}});
    EXPECT_TRUE(reader.get_bool("k", false, "")) << yes;
    EXPECT_NO_THROW(reader.finish()) << yes;
  }
  for (const char* no : {"false", "0", "no", "off", "False", "NO"}) {
    OptionReader reader("p", {{"k", no}});
    EXPECT_FALSE(reader.get_bool("k", true, "")) << no;
    EXPECT_NO_THROW(reader.finish()) << no;
  }
  OptionReader reader("p", {{"overlap", "maybe"}});
  reader.get_bool("overlap", true, "");
  EXPECT_EQ(finish_message(reader),
            "p: option overlap='maybe' is not a boolean (use true/false, 1/0, yes/no or on/off)");
}

TEST(PluginOptions, IntegersAreParsedStrictly) {
  for (auto [text, value] : {std::pair{"0", 0}, {"+4", 4}, {"-3", -3}, {"123456", 123456}}) {
    OptionReader reader("p", {{"k", text}});
    EXPECT_EQ(reader.get_int("k", 99, ""), value) << text;
    EXPECT_NO_THROW(reader.finish()) << text;
  }
  for (const char* bad : {"2.5", "abc", "", " 3", "3 ", "1e3", "0x10", "+", "--1"}) {
    OptionReader reader("torch_ddp", {{"tp_size", bad}});
    EXPECT_EQ(reader.get_int("tp_size", 99, ""), 99) << bad;
    EXPECT_EQ(finish_message(reader), "torch_ddp: option tp_size='" + std::string(bad) + "' is not an integer") << bad;
  }
  OptionReader reader("p", {{"k", "99999999999999999999"}});
  reader.get_int("k", 0, "");
  EXPECT_NE(finish_message(reader).find("is out of the range of a 64-bit integer"), std::string::npos);
}

TEST(PluginOptions, DoublesAreParsedStrictly) {
  for (auto [text, value] : {std::pair{"25", 25.0}, {"-0.5", -0.5}, {"1e-3", 1e-3}, {".5", 0.5}}) {
    OptionReader reader("p", {{"k", text}});
    EXPECT_DOUBLE_EQ(reader.get_double("k", 99, ""), value) << text;
    EXPECT_NO_THROW(reader.finish()) << text;
  }
  for (const char* bad : {"abc", "", " 1", "1.5x", "1,5"}) {
    OptionReader reader("torch_ddp", {{"bucket_cap_mb", bad}});
    EXPECT_DOUBLE_EQ(reader.get_double("bucket_cap_mb", 25, ""), 25) << bad;
    EXPECT_EQ(finish_message(reader), "torch_ddp: option bucket_cap_mb='" + std::string(bad) + "' is not a number")
        << bad;
  }
  for (const char* not_finite : {"nan", "inf", "-inf", "1e999"}) {
    OptionReader reader("p", {{"k", not_finite}});
    reader.get_double("k", 1, "");
    EXPECT_NE(finish_message(reader).find("is not a finite number"), std::string::npos) << not_finite;
  }
}

TEST(PluginOptions, ChoicesListTheAllowedValues) {
  OptionReader reader("hybrid_parallel", {{"precision", "fp64"}});
  EXPECT_EQ(reader.get_choice("precision", "fp32", {"fp32", "fp16", "bf16"}, ""), "fp32");
  EXPECT_EQ(finish_message(reader), "hybrid_parallel: option precision='fp64' is not one of fp32, fp16, bf16");

  OptionReader typo("hybrid_parallel", {{"schedule", "1f1c"}});
  typo.get_choice("schedule", "1f1b", {"1f1b", "interleaved"}, "");
  EXPECT_EQ(finish_message(typo),
            "hybrid_parallel: option schedule='1f1c' is not one of 1f1b, interleaved (did you mean '1f1b'?)");
}

TEST(PluginOptions, UnknownKeyListsTheValidKeysWithDefaults) {
  OptionReader reader("torch_ddp", {{"bucket_cap", "50"}});
  reader.get_double("bucket_cap_mb", 25, "bucket size");
  reader.get_choice("precision", "fp32", {"fp32", "bf16"}, "compute dtype");
  reader.get_bool("static_graph", false, "");
  reader.get_string("note", "", "");
  EXPECT_EQ(finish_message(reader),
            "torch_ddp: unknown option 'bucket_cap' (did you mean 'bucket_cap_mb'?); valid options: bucket_cap_mb "
            "(default 25), precision (default fp32), static_graph (default false), note (default \"\")");
}

TEST(PluginOptions, UnknownKeyWithoutALikelyMatchHasNoSuggestion) {
  OptionReader reader("torch_ddp", {{"zzz", "1"}});
  reader.get_int("bucket_cap_mb", 25, "");
  const std::string message = finish_message(reader);
  EXPECT_NE(message.find("unknown option 'zzz'; valid options: bucket_cap_mb (default 25)"), std::string::npos)
      << message;
  EXPECT_EQ(message.find("did you mean"), std::string::npos) << message;
}

TEST(PluginOptions, APluginWithoutOptionsSaysSo) {
  OptionReader reader("single_device", {{"tp_size", "2"}});
  EXPECT_EQ(finish_message(reader), "single_device: unknown option 'tp_size'; it takes no options");
}

TEST(PluginOptions, EveryProblemIsReportedInOneError) {
  OptionReader reader("low_level_zero",
                      {{"stage", "3"}, {"overlap", "perhaps"}, {"bucket_mb", "x"}, {"offload", "1"}, {"typo", "1"}});
  const int64_t stage = reader.get_int("stage", 1, "ZeRO stage");
  reader.get_bool("overlap", true, "");
  reader.get_double("bucket_mb", 25, "");
  reader.get_bool("cpu_offload", false, "");
  if (stage != 1 && stage != 2) reader.fail("stage must be 1 or 2, got " + std::to_string(stage));
  const std::string message = finish_message(reader);
  EXPECT_EQ(message,
            "low_level_zero: 5 problems with the plugin options:\n"
            "  - option overlap='perhaps' is not a boolean (use true/false, 1/0, yes/no or on/off)\n"
            "  - option bucket_mb='x' is not a number\n"
            "  - stage must be 1 or 2, got 3\n"
            "  - unknown option 'offload'\n"
            "  - unknown option 'typo'\n"
            "  valid options: stage (default 1), overlap (default true), bucket_mb (default 25), cpu_offload "
            "(default false)");
}

TEST(PluginOptions, RulesAloneAreReportedWithoutTheKeyList) {
  OptionReader reader("p", {});
  reader.fail("tp_size (3) must divide the number of heads (4)");
  EXPECT_EQ(finish_message(reader), "p: tp_size (3) must divide the number of heads (4)");
}

TEST(PluginOptions, DescribeListsDeclaredKeysOnceInOrder) {
  OptionReader reader("p", {});
  reader.get_int("tp_size", 1, "tensor-parallel ranks");
  reader.get_choice("precision", "fp32", {"fp32", "bf16"}, "compute dtype");
  reader.get_int("tp_size", 1, "tensor-parallel ranks");  // read again on another path: still one key
  const std::vector<std::string> expected = {"tp_size (default: 1) tensor-parallel ranks",
                                             "precision (default: fp32) compute dtype (one of fp32, bf16)"};
  EXPECT_EQ(reader.describe(), expected);
}

// ---- Colossal-AI's option names (booster/src/colossalai_option_names.h, docs/coming_from_colossalai.md)

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "missing \"" << (part) << "\" in:\n" << (text)

TEST(PluginOptions, AColossalAiNameSaysWhatColoCallsItAndWhereTheGuideSaysMore) {
  OptionReader reader("hybrid_parallel", {{"enable_flash_attention", "true"}});
  reader.get_int("tp_size", 1, "");
  const std::string message = finish_message(reader);
  EXPECT_CONTAINS(message, "hybrid_parallel: unknown option 'enable_flash_attention' (a Colossal-AI option: not in");
  EXPECT_CONTAINS(message, "scaled_dot_product_attention");
  EXPECT_CONTAINS(message,
                  "; see docs/coming_from_colossalai.md#hybridparallelplugin); valid options: tp_size (default 1)");
}

TEST(PluginOptions, AColossalAiNameAmongOtherProblemsGetsItsHintOnItsOwnLine) {
  OptionReader reader("low_level_zero", {{"max_norm", "1.0"}, {"stage", "3"}});
  const int64_t stage = reader.get_int("stage", 1, "");
  reader.get_double("max_grad_norm", 0.0, "");
  if (stage != 1 && stage != 2) reader.fail("stage must be 1 or 2, got " + std::to_string(stage));
  EXPECT_EQ(finish_message(reader),
            "low_level_zero: 2 problems with the plugin options:\n"
            "  - stage must be 1 or 2, got 3\n"
            "  - unknown option 'max_norm' (a Colossal-AI option: colo calls it max_grad_norm [0: off]; see "
            "docs/coming_from_colossalai.md#options-every-plugin-shares)\n"
            "  valid options: stage (default 1), max_grad_norm (default 0)");
}

TEST(PluginOptions, AnUnknownNameThatIsNotColossalAisKeepsThePlainMessage) {
  OptionReader reader("hybrid_parallel", {{"bogus_flag", "1"}});
  reader.get_int("tp_size", 1, "");
  EXPECT_EQ(finish_message(reader), "hybrid_parallel: unknown option 'bogus_flag'; valid options: tp_size (default 1)");
  // A Colossal-AI name that colo also uses (tp_size is hybrid_parallel's) gets no hint elsewhere.
  EXPECT_EQ(colo::detail::colossalai_option_hint("tp_size"), "");
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The anchors GitHub gives a Markdown file's headings: lower case, spaces to '-', every other
// character but letters, digits, '-' and '_' dropped.
std::set<std::string> heading_anchors(const std::string& text) {
  std::set<std::string> anchors;
  std::size_t at = 0;
  while (at < text.size()) {
    const auto end = std::min(text.find('\n', at), text.size());
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    if (line.empty() || line[0] != '#') continue;
    const auto title = line.find_first_not_of('#');
    if (title == std::string::npos || line[title] != ' ') continue;
    std::string anchor;
    for (const char c : line.substr(title + 1)) {
      const auto u = static_cast<unsigned char>(c);
      if (std::isalnum(u) || c == '-' || c == '_') anchor += static_cast<char>(std::tolower(u));
      if (c == ' ') anchor += '-';
    }
    anchors.insert(anchor);
  }
  return anchors;
}

TEST(ColossalAiGuide, EveryHintPointsAtAHeadingOfTheGuideThatNamesTheOption) {
  const std::string guide = read_text(COLO_SOURCE_DIR "/docs/coming_from_colossalai.md");
  const auto anchors = heading_anchors(guide);
  ASSERT_FALSE(anchors.empty()) << "docs/coming_from_colossalai.md has no headings";
  std::set<std::string> names;
  for (const auto& option : colo::detail::colossalai_options()) {
    EXPECT_TRUE(names.insert(option.name).second) << option.name << " is in the table twice";
    EXPECT_TRUE(anchors.count(option.anchor))
        << option.name << " points at #" << option.anchor << ", which is no heading of docs/coming_from_colossalai.md";
    EXPECT_NE(guide.find("`" + std::string(option.name) + "`"), std::string::npos)
        << "docs/coming_from_colossalai.md does not mention `" << option.name << "`";
    const std::string hint = colo::detail::colossalai_option_hint(option.name);
    EXPECT_NE(hint.find(std::string("coming_from_colossalai.md#") + option.anchor), std::string::npos) << hint;
  }
}

}  // namespace
