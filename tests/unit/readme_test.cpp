// The README's C++ example is examples/quickstart/quickstart.cpp, which every build compiles: this
// checks that the README still shows exactly that code, so the README cannot drift from the API.
// docs/writing_a_plugin.md's minimal plugin is checked the same way against examples/custom_plugin.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The lines of a Markdown file's first ```cpp block.
std::vector<std::string> first_cpp_block(const std::vector<std::string>& readme) {
  std::vector<std::string> block;
  bool inside = false;
  for (const auto& line : readme) {
    if (!inside && line == "```cpp") {
      inside = true;
    } else if (inside && line == "```") {
      return block;
    } else if (inside) {
      block.push_back(line);
    }
  }
  ADD_FAILURE() << "no complete ```cpp block";
  return {};
}

// The lines between each "// <doc> begin" and the next "// <doc> end", each section without its
// begin marker's indentation; sections are separated by one empty line.
std::vector<std::string> marked_sections(const std::vector<std::string>& source, const std::string& doc = "README") {
  std::vector<std::string> out;
  std::string indent;
  bool inside = false;
  for (const auto& line : source) {
    const auto text_at = line.find_first_not_of(' ');
    const std::string text = text_at == std::string::npos ? "" : line.substr(text_at);
    if (text == "// " + doc + " begin") {
      if (!out.empty()) out.push_back("");
      indent = line.substr(0, text_at);
      inside = true;
    } else if (text == "// " + doc + " end") {
      inside = false;
    } else if (inside) {
      EXPECT_TRUE(line.empty() || line.compare(0, indent.size(), indent) == 0) << "under-indented: " << line;
      out.push_back(line.size() >= indent.size() ? line.substr(indent.size()) : line);
    }
  }
  return out;
}

TEST(Readme, CppExampleIsTheCompiledQuickstart) {
  const auto readme = first_cpp_block(read_lines(COLO_SOURCE_DIR "/README.md"));
  const auto quickstart = marked_sections(read_lines(COLO_SOURCE_DIR "/examples/quickstart/quickstart.cpp"));
  ASSERT_GT(quickstart.size(), 20u) << "examples/quickstart/quickstart.cpp lost its README markers";
  ASSERT_EQ(readme.size(), quickstart.size()) << "README.md's C++ example and examples/quickstart differ";
  for (std::size_t i = 0; i < readme.size(); ++i) {
    EXPECT_EQ(readme[i], quickstart[i]) << "line " << i + 1 << " of README.md's C++ example";
  }
}

TEST(Readme, WritingAPluginShowsTheCompiledExamplePlugin) {
  const auto doc = first_cpp_block(read_lines(COLO_SOURCE_DIR "/docs/writing_a_plugin.md"));
  const auto plugin = marked_sections(read_lines(COLO_SOURCE_DIR "/examples/custom_plugin/single_device_plugin.cpp"),
                                      "docs/writing_a_plugin.md");
  ASSERT_GT(plugin.size(), 20u) << "examples/custom_plugin/single_device_plugin.cpp lost its markers";
  ASSERT_EQ(doc.size(), plugin.size()) << "docs/writing_a_plugin.md's plugin and examples/custom_plugin differ";
  for (std::size_t i = 0; i < doc.size(); ++i) {
    EXPECT_EQ(doc[i], plugin[i]) << "line " << i + 1 << " of docs/writing_a_plugin.md's C++ block";
  }
}

}  // namespace
