#include <gtest/gtest.h>
#include <torch/torch.h>
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

#include <colo/checkpoint/atomic_file.h>
#include <colo/checkpoint/safetensors.h>

#include "temporary_directory.h"

namespace {

using colo::testing::TemporaryDirectory;

bool file_exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

using colo::checkpoint::CheckpointError;
using colo::checkpoint::NamedTensors;
using colo::checkpoint::read_safetensors;
using colo::checkpoint::write_safetensors;

class Safetensors : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_.file(name); }

  // A file in safetensors layout from raw parts, to build malformed files.
  std::string write_raw(const std::string& name, std::uint64_t header_length, const std::string& header,
                        const std::string& data) const {
    std::ofstream out(path(name), std::ios::binary);
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((header_length >> (8 * i)) & 0xff));
    out << header << data;
    return path(name);
  }
  std::string write_raw(const std::string& name, const std::string& header, std::size_t data_bytes) const {
    return write_raw(name, header.size(), header, std::string(data_bytes, '\0'));
  }

  std::vector<std::string> directory_entries() const { return dir_.entries(); }

  TemporaryDirectory dir_;
};

// Every message must name the file and contain each of `fragments`.
void expect_rejected(const std::string& file, const std::vector<std::string>& fragments) {
  try {
    read_safetensors(file);
    ADD_FAILURE() << file << " was accepted";
  } catch (const CheckpointError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(file), std::string::npos) << message;
    for (const auto& fragment : fragments) EXPECT_NE(message.find(fragment), std::string::npos) << message;
  }
}

std::string read_bytes(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST_F(Safetensors, RoundTripsEveryDtype) {
  torch::manual_seed(3);
  NamedTensors tensors{
      {"f64", torch::randn({3, 4}, torch::kFloat64)},
      {"f32", torch::randn({5}, torch::kFloat32)},
      {"f16", torch::randn({2, 3}).to(torch::kFloat16)},
      {"bf16", torch::randn({7}).to(torch::kBFloat16)},
      {"i64", torch::randint(-1000000000000LL, 1000000000000LL, {4}, torch::kInt64)},
      {"i32", torch::randint(-100000, 100000, {2, 2}, torch::kInt32)},
      {"i16", torch::randint(-30000, 30000, {3}, torch::kInt16)},
      {"i8", torch::randint(-128, 127, {5}, torch::kInt8)},
      {"u8", torch::randint(0, 255, {3, 1}, torch::kUInt8)},
      {"bool", torch::rand({9}) > 0.5},
      {"scalar", torch::tensor(2.5)},
      {"empty", torch::zeros({0, 3})},
      {"transposed", torch::randn({3, 5}).t()},  // non-contiguous: written in logical order
  };
  const std::map<std::string, std::string> metadata{{"format", "pt"}, {"step", "12"}};
  write_safetensors(path("all.safetensors"), tensors, metadata);

  const auto file = read_safetensors(path("all.safetensors"));
  EXPECT_EQ(file.metadata, metadata);
  ASSERT_EQ(file.tensors.size(), tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, expected] = tensors[i];
    const auto& [read_name, actual] = file.tensors[i];
    EXPECT_EQ(read_name, name) << "tensors come back in the order they were written";
    EXPECT_EQ(actual.scalar_type(), expected.scalar_type()) << name;
    EXPECT_EQ(actual.sizes(), expected.sizes()) << name;
    EXPECT_TRUE(torch::equal(actual, expected)) << name;
  }
  EXPECT_TRUE(file.contains("bf16"));
  EXPECT_FALSE(file.contains("nope"));
  EXPECT_TRUE(torch::equal(file.at("i8"), tensors[7].second));
  EXPECT_THROW(file.at("nope"), std::out_of_range);
}

TEST_F(Safetensors, HeaderIsSpacePaddedToEightBytes) {
  write_safetensors(path("pad.safetensors"), {{"x", torch::ones({3}, torch::kInt8)}});
  const std::string bytes = read_bytes(path("pad.safetensors"));
  std::uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = (header_length << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ(header_length % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + header_length + 3);
  const std::string header = bytes.substr(8, header_length);
  EXPECT_EQ(header.front(), '{');
  const auto close = header.rfind('}');
  EXPECT_EQ(header.find_first_not_of(' ', close + 1), std::string::npos) << "padding must be spaces: " << header;
}

TEST_F(Safetensors, ReadsTheFilePythonsSafetensorsWrote) {
  const std::string file = COLO_BINARY_DIR "/oracle/python_sample.safetensors";
  ASSERT_TRUE(file_exists(file)) << file << " is missing: run `python3 " COLO_SOURCE_DIR
                                           "/tests/oracle/write_safetensors_sample.py --out " COLO_BINARY_DIR
                                           "/oracle` (CTest fixture oracle_safetensors_sample)";
  const auto sample = read_safetensors(file);
  EXPECT_EQ(sample.metadata.at("producer"), "python safetensors");
  EXPECT_EQ(sample.metadata.at("format"), "pt");
  EXPECT_EQ(sample.tensors.size(), 12u);

  const auto floats = torch::arange(6, torch::kFloat64).reshape({2, 3}) * 0.5 - 1.0;
  const auto ints = torch::arange(6, torch::kInt64).reshape({2, 3}) - 3;
  const std::vector<std::pair<std::string, torch::Tensor>> expected{
      {"f64", floats},
      {"f32", floats.to(torch::kFloat32)},
      {"f16", floats.to(torch::kFloat16)},
      {"bf16", floats.to(torch::kBFloat16)},
      {"i64", ints},
      {"i32", ints.to(torch::kInt32)},
      {"i16", ints.to(torch::kInt16)},
      {"i8", ints.to(torch::kInt8)},
      {"u8", (torch::arange(6).reshape({2, 3}) * 50).to(torch::kUInt8)},
      {"bool", torch::tensor({true, false, true, true, false, false}).reshape({2, 3})},
      {"scalar", torch::tensor(3.5f)},
      {"empty", torch::zeros({0, 4}, torch::kInt64)},
  };
  for (const auto& [name, value] : expected) {
    ASSERT_TRUE(sample.contains(name)) << name;
    const auto& actual = sample.at(name);
    EXPECT_EQ(actual.scalar_type(), value.scalar_type()) << name;
    EXPECT_EQ(actual.sizes(), value.sizes()) << name;
    EXPECT_TRUE(torch::equal(actual, value)) << name << ": " << actual;
  }
}

TEST_F(Safetensors, RejectsMissingAndTooShortFiles) {
  expect_rejected(path("absent.safetensors"), {"no such file"});
  std::ofstream(path("zero.safetensors"), std::ios::binary).flush();
  expect_rejected(path("zero.safetensors"), {"0 bytes", "too short"});
  std::ofstream(path("four.safetensors"), std::ios::binary) << "abcd";
  expect_rejected(path("four.safetensors"), {"4 bytes", "too short"});
}

TEST_F(Safetensors, RejectsAHeaderLengthBeyondTheFile) {
  expect_rejected(write_raw("length.safetensors", 1000, "{}", ""), {"header length 1000", "does not fit"});
  expect_rejected(write_raw("huge.safetensors", ~0ULL, "{}", ""),
                  {"header length 18446744073709551615 is over the format's limit of 100000000 bytes"});
}

// The header-length cap (100,000,000 bytes, as the Rust reference implementation's) at its
// boundary, in sparse files long enough to hold each header: at the cap and one below, the
// header is read (and found not to be JSON: the file is zeros); one above, it is refused before
// anything is allocated or read.
TEST_F(Safetensors, HeaderLengthCapHoldsAtItsBoundary) {
  constexpr std::uint64_t kCap = 100'000'000;
  const auto sparse = [&](const std::string& name, std::uint64_t header_length) {
    const std::string file = write_raw(name, header_length, "", "");
    EXPECT_EQ(::truncate(file.c_str(), static_cast<off_t>(8 + header_length)), 0) << file;
    return file;
  };
  for (const std::uint64_t length : {kCap - 1, kCap}) {
    expect_rejected(sparse("at" + std::to_string(length) + ".safetensors", length), {"header is not valid JSON"});
  }
  expect_rejected(sparse("over.safetensors", kCap + 1),
                  {"header length 100000001 is over the format's limit of 100000000 bytes"});
}

TEST_F(Safetensors, RejectsInvalidJson) {
  expect_rejected(write_raw("json.safetensors", "{\"a\": {\"dtype\": \"F32\",", 0), {"not valid JSON"});
  expect_rejected(write_raw("array.safetensors", "[1, 2]", 0), {"not a JSON object"});
}

TEST_F(Safetensors, RejectsAnUnknownDtype) {
  expect_rejected(write_raw("dtype.safetensors", R"({"w": {"dtype": "X32", "shape": [2], "data_offsets": [0, 8]}})", 8),
                  {"tensor 'w'", "dtype 'X32'", "supported: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL"});
}

TEST_F(Safetensors, RejectsOffsetsThatDoNotMatchTheShape) {
  const std::string header =
      R"({"blocks.0.attn.qkv.weight": {"dtype": "F32", "shape": [576, 192], "data_offsets": [0, 100]}})";
  expect_rejected(write_raw("model.safetensors", header, 100),
                  {"tensor 'blocks.0.attn.qkv.weight' data_offsets [0, 100] do not match shape [576, 192] of F32 "
                   "(442368 bytes); the file is truncated or corrupt"});
}

TEST_F(Safetensors, RejectsATruncatedFile) {
  write_safetensors(path("full.safetensors"), {{"a", torch::ones({4})}, {"b", torch::ones({8})}});
  const std::string bytes = read_bytes(path("full.safetensors"));
  std::ofstream(path("cut.safetensors"), std::ios::binary) << bytes.substr(0, bytes.size() - 5);
  expect_rejected(path("cut.safetensors"),
                  {"tensor 'b' data_offsets [16, 48] extend past the end of the data region (43 bytes)", "truncated"});
}

TEST_F(Safetensors, RejectsOverlappingTensors) {
  const std::string header = R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},)"
                             R"( "b": {"dtype": "I64", "shape": [2], "data_offsets": [8, 24]}})";
  expect_rejected(write_raw("overlap.safetensors", header, 24), {"'a' [0, 16]", "'b' [8, 24]", "overlapping"});
}

// A shape whose byte count does not fit in 64 bits is colo's error, however the product wraps:
// [2^62, 4] of F32 wraps to 0 bytes, which empty data_offsets would match (the tensor would then
// fail later, as an allocation of 2^64 elements). At the boundary: F32 [2^62 - 1] is 2^64 - 4
// bytes (fits, and is then compared with the offsets), [2^62] and [2^62 + 1] do not fit; a U8
// dimension of 2^63 - 1 fits, 2^63 is beyond int64_t, which a tensor's sizes are.
TEST_F(Safetensors, RejectsShapesWhoseByteCountOverflows) {
  const auto entry = [&](const std::string& name, const std::string& dtype, const std::string& shape) {
    return write_raw(name, R"({"w": {"dtype": ")" + dtype + R"(", "shape": )" + shape + R"(, "data_offsets": [0, 0]}})",
                     0);
  };
  const std::string too_large = "is too large; the header is corrupt";
  expect_rejected(entry("wrap.safetensors", "F32", "[4611686018427387904, 4]"),
                  {"tensor 'w' shape [4611686018427387904, 4] " + too_large});
  expect_rejected(entry("fits.safetensors", "F32", "[4611686018427387903]"),
                  {"do not match shape [4611686018427387903] of F32 (18446744073709551612 bytes)"});
  expect_rejected(entry("at.safetensors", "F32", "[4611686018427387904]"), {too_large});
  expect_rejected(entry("past.safetensors", "F32", "[4611686018427387905]"), {too_large});
  expect_rejected(entry("u8fits.safetensors", "U8", "[9223372036854775807]"),
                  {"do not match shape [9223372036854775807] of U8 (9223372036854775807 bytes)"});
  expect_rejected(entry("u8over.safetensors", "U8", "[9223372036854775808]"), {too_large});
}

TEST_F(Safetensors, RejectsMalformedEntries) {
  expect_rejected(write_raw("neg.safetensors", R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8),
                  {"tensor 'w'", "'shape'", "-2", "non-negative integer"});
  expect_rejected(write_raw("float.safetensors", R"({"w": {"dtype": "F32", "shape": [2.5], "data_offsets": [0, 8]}})", 8),
                  {"'shape'", "2.5"});
  expect_rejected(write_raw("nooff.safetensors", R"({"w": {"dtype": "F32", "shape": [2]}})", 8),
                  {"tensor 'w'", "no 'data_offsets'"});
  expect_rejected(write_raw("three.safetensors", R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4, 8]}})", 8),
                  {"[0, 4, 8]", "two numbers"});
  expect_rejected(write_raw("back.safetensors", R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 0]}})", 8),
                  {"[8, 0]", "end before"});
  expect_rejected(write_raw("meta.safetensors", R"({"__metadata__": {"step": 3}})", 0),
                  {"__metadata__", "'step'", "not a string"});
}

TEST_F(Safetensors, WriteRejectsWhatTheFormatCannotHold) {
  EXPECT_THROW(write_safetensors(path("c.safetensors"), {{"z", torch::zeros({2}, torch::kComplexFloat)}}),
               CheckpointError);
  EXPECT_THROW(write_safetensors(path("d.safetensors"), {{"a", torch::zeros({2})}, {"a", torch::zeros({2})}}),
               CheckpointError);
  EXPECT_THROW(write_safetensors(path("m.safetensors"), {{"__metadata__", torch::zeros({2})}}), CheckpointError);
  EXPECT_TRUE(directory_entries().empty()) << "a rejected write must leave nothing behind";
}

// Tensors made one at a time as they are written (a tensor-parallel save gathers each in turn):
// the same bytes as writing them whole, each made once, in order; one that is not what it was
// announced to be leaves no file.
TEST_F(Safetensors, PendingTensorsAreMadeInTurnAndMustBeWhatTheHeaderSaid) {
  const auto a = torch::arange(6, torch::kFloat).reshape({2, 3});
  const auto b = torch::arange(4, torch::kInt64);
  std::vector<std::string> made;
  const std::vector<colo::checkpoint::PendingTensor> pending{
      {"a", torch::kFloat, {2, 3}, [&] { made.push_back("a"); return a; }},
      {"b", torch::kInt64, {4}, [&] { made.push_back("b"); return b; }}};
  write_safetensors(path("pending.safetensors"), pending, {{"format", "colo"}});
  write_safetensors(path("whole.safetensors"), {{"a", a}, {"b", b}}, {{"format", "colo"}});
  EXPECT_EQ(made, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(read_bytes(path("pending.safetensors")), read_bytes(path("whole.safetensors")));

  const std::vector<colo::checkpoint::PendingTensor> wrong{{"a", torch::kFloat, {3, 2}, [&] { return a; }}};
  try {
    write_safetensors(path("wrong.safetensors"), wrong);
    ADD_FAILURE() << "a tensor of another shape was written";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("'a' was announced as F32 3x2 but its values are Float 2x3"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(directory_entries(), (std::vector<std::string>{"pending.safetensors", "whole.safetensors"}));
}

TEST_F(Safetensors, AtomicWriteLeavesNoTemporaryFile) {
  write_safetensors(path("w.safetensors"), {{"a", torch::arange(10)}});
  write_safetensors(path("w.safetensors"), {{"b", torch::arange(3)}});  // replaces the first
  EXPECT_EQ(directory_entries(), std::vector<std::string>{"w.safetensors"});
  const auto file = read_safetensors(path("w.safetensors"));
  ASSERT_EQ(file.tensors.size(), 1u);
  EXPECT_EQ(file.tensors[0].first, "b");
}

TEST_F(Safetensors, FailedAtomicWriteKeepsTheOldFile) {
  colo::checkpoint::atomic_write_file(path("index.json"), std::string_view("{\"old\": true}"));
  EXPECT_THROW(colo::checkpoint::atomic_write_file(path("index.json"),
                                                   [](std::ostream& out) {
                                                     out << "{\"new\": ";
                                                     throw std::runtime_error("serialisation failed");
                                                   }),
               std::runtime_error);
  EXPECT_EQ(read_bytes(path("index.json")), "{\"old\": true}");
  EXPECT_EQ(directory_entries(), std::vector<std::string>{"index.json"});
}

TEST_F(Safetensors, AtomicWriteIntoAMissingDirectoryNamesIt) {
  const std::string target = path("no/such/dir/x.safetensors");
  try {
    write_safetensors(target, {{"a", torch::zeros({1})}});
    ADD_FAILURE() << "write into a missing directory succeeded";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no/such/dir"), std::string::npos) << e.what();
  }
}

}  // namespace
