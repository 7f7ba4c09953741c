// What a hostile image folder cannot do to colo::data: a header that claims a huge image
// (data::kMaxImagePixels, before anything is allocated), symbolic-link cycles (followed once, not
// 32 levels deep) and links that lead nowhere (reported, not skipped silently).
#include <colo/data/dataset_error.h>
#include <colo/data/image_codec.h>
#include <colo/data/image_folder.h>
#include <colo/files/files.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "error_of.h"
#include "temporary_directory.h"

namespace colo::data {
namespace {

using colo::testing::error_of;
using TempDir = colo::testing::TemporaryDirectory;

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "expected \"" << (part) << "\" in: " << (text)

std::vector<uint8_t> bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
}

void put_be(std::vector<uint8_t>& bytes, size_t at, uint32_t value, int width) {
  for (int i = 0; i < width; ++i) bytes[at + i] = static_cast<uint8_t>(value >> (8 * (width - 1 - i)));
}

uint32_t crc32(const uint8_t* data, size_t size) {
  uint32_t crc = 0xffffffffU;
  for (size_t i = 0; i < size; ++i) {
    crc ^= data[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320U & (0U - (crc & 1U)));
  }
  return ~crc;
}

std::vector<uint8_t> small_rgb() {
  std::vector<uint8_t> rgb(8 * 8 * 3);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>(37 * i);
  return rgb;
}

// A valid 8x8 PNG whose header (IHDR, with a correct CRC) claims width x height.
void write_png_claiming(const std::string& path, uint32_t width, uint32_t height) {
  write_png(path, small_rgb().data(), 8, 8);
  auto bytes = bytes_of(path);
  // signature (8), IHDR length (4) and type (4), then width and height; the CRC covers type + 13 bytes.
  put_be(bytes, 16, width, 4);
  put_be(bytes, 20, height, 4);
  put_be(bytes, 29, crc32(bytes.data() + 12, 17), 4);
  write_bytes(path, bytes);
}

// A valid 8x8 JPEG whose frame header (SOF0) claims width x height.
void write_jpeg_claiming(const std::string& path, uint16_t width, uint16_t height) {
  write_jpeg(path, small_rgb().data(), 8, 8);
  auto bytes = bytes_of(path);
  for (size_t i = 2; i + 8 < bytes.size(); ++i) {
    if (bytes[i] == 0xff && bytes[i + 1] == 0xc0) {  // FFC0 length(2) precision(1) height(2) width(2)
      put_be(bytes, i + 5, height, 2);
      put_be(bytes, i + 7, width, 2);
      write_bytes(path, bytes);
      return;
    }
  }
  FAIL() << "no SOF0 marker in " << path;
}

TEST(HugeImageHeaders, APngClaiming100000x100000IsADatasetErrorNamingTheFile) {
  TempDir dir;
  const std::string path = dir / "huge.png";
  write_png_claiming(path, 100000, 100000);
  const auto bytes = bytes_of(path);
  for (const std::string& message :
       {error_of<DatasetError>([&] { read_image_info(bytes.data(), bytes.size(), path); }),
        error_of<DatasetError>([&] { decode_image(bytes.data(), bytes.size(), path); })}) {
    EXPECT_CONTAINS(message, path);
    EXPECT_CONTAINS(message, "PNG header declares 100000x100000 pixels");
    EXPECT_CONTAINS(message, "kMaxImagePixels");
  }
}

TEST(HugeImageHeaders, AJpegClaiming60000x60000IsADatasetErrorNamingTheFile) {
  TempDir dir;
  const std::string path = dir / "huge.jpg";
  write_jpeg_claiming(path, 60000, 60000);
  const auto bytes = bytes_of(path);
  for (const std::string& message :
       {error_of<DatasetError>([&] { read_image_info(bytes.data(), bytes.size(), path); }),
        error_of<DatasetError>([&] { decode_image(bytes.data(), bytes.size(), path); })}) {
    EXPECT_CONTAINS(message, path);
    EXPECT_CONTAINS(message, "JPEG header declares 60000x60000 pixels");
  }
}

// 14351 x 12470 is kMaxImagePixels exactly: one row fewer and the limit itself pass, one more fails.
TEST(HugeImageHeaders, TheLimitIsKMaxImagePixelsExactly) {
  ASSERT_EQ(int64_t{14351} * 12470, kMaxImagePixels);
  TempDir dir;
  for (const uint32_t height : {12469U, 12470U, 12471U}) {
    for (const bool png : {true, false}) {
      const std::string path = dir / (png ? "limit.png" : "limit.jpg");
      if (png) {
        write_png_claiming(path, 14351, height);
      } else {
        write_jpeg_claiming(path, 14351, static_cast<uint16_t>(height));
      }
      const auto bytes = bytes_of(path);
      if (height <= 12470) {
        EXPECT_EQ(read_image_info(bytes.data(), bytes.size(), path).height, height) << path;
      } else {
        EXPECT_CONTAINS(error_of<DatasetError>([&] { read_image_info(bytes.data(), bytes.size(), path); }),
                        "declares 14351x12471 pixels");
      }
    }
  }
}

// An image folder of 2 classes x 2 good images, and `extra` written into class "cat".
std::string write_folder(const TempDir& dir) {
  const std::string root = dir / "photos";
  for (const char* name : {"cat", "dog"}) {
    files::create_directories(files::join(root, name));
    for (int k = 0; k < 2; ++k) write_png(files::join(root, name, std::to_string(k) + ".png"), small_rgb().data(), 8, 8);
  }
  return root;
}

TEST(HugeImageHeaders, SkipUnreadableSkipsAHugePngAndWithoutItTheErrorNamesTheFile) {
  TempDir dir;
  const std::string root = write_folder(dir);
  const std::string huge = files::join(root, "cat", "1.png");  // the second image of the data set
  write_png_claiming(huge, 100000, 100000);
  ImageFolder strict(root, ImageFolderOptions(8));
  EXPECT_CONTAINS(error_of<DatasetError>([&] { strict.get_batch({1}); }), huge);
  ImageFolder skipping(root, ImageFolderOptions(8).skip_unreadable(true));
  const auto batch = skipping.get_batch({0, 1, 2});
  EXPECT_EQ(batch.images.size(0), 3);
  EXPECT_EQ(skipping.num_skipped(), 1);
  ASSERT_EQ(skipping.skipped_files().size(), 1U);
  EXPECT_CONTAINS(skipping.skipped_files()[0], huge);
}

void make_link(const std::string& target, const std::string& path) { ASSERT_EQ(::symlink(target.c_str(), path.c_str()), 0) << path; }

TEST(ImageFolderLinks, ACycleIsFollowedOnceAndReported) {
  TempDir dir;
  const std::string root = write_folder(dir);
  make_link("..", files::join(root, "cat", "up"));      // back to the root: every class again, forever
  make_link(".", files::join(root, "dog", "itself"));   // the class itself
  files::create_directories(files::join(root, "dog", "deeper"));
  make_link("../..", files::join(root, "dog", "deeper", "loop"));  // two levels up
  const ImageFolder folder(root, ImageFolderOptions(8));
  EXPECT_EQ(folder.size(), 4);
  EXPECT_EQ(folder.classes(), (std::vector<std::string>{"cat", "dog"}));
  for (int64_t i = 0; i < folder.size(); ++i) {
    EXPECT_EQ(folder.label(i), folder.path(i).find("/cat/") != std::string::npos ? 0 : 1) << folder.path(i);
  }
  ASSERT_EQ(folder.scan_notes().size(), 3U);
  std::string notes;
  for (const auto& note : folder.scan_notes()) notes += note + "\n";
  for (const char* part : {"cat/up (a link to ..)", "dog/itself (a link to .)", "dog/deeper/loop (a link to ../..)",
                           "(a cycle): not followed"}) {
    EXPECT_CONTAINS(notes, part);
  }
}

TEST(ImageFolderLinks, ALinkToAnotherClassIsFollowedAsTorchvisionDoes) {
  TempDir dir;
  const std::string root = write_folder(dir);
  make_link(files::join(root, "dog"), files::join(root, "cat", "dogs"));
  const ImageFolder folder(root, ImageFolderOptions(8));
  EXPECT_EQ(folder.size(), 6);  // dog's two images, once more as cats
  EXPECT_TRUE(folder.scan_notes().empty());
}

TEST(ImageFolderLinks, DanglingAndLoopingLinksAreErrorsOrWithSkipUnreadableNotes) {
  TempDir dir;
  const std::string root = write_folder(dir);
  make_link("nowhere.png", files::join(root, "cat", "gone.png"));
  make_link("b", files::join(root, "dog", "a"));
  make_link("a", files::join(root, "dog", "b"));
  std::string message = error_of<DatasetError>([&] { ImageFolder(root, ImageFolderOptions(8)); });
  EXPECT_CONTAINS(message, "cat/gone.png: a symbolic link to nowhere.png that leads nowhere (dangling)");
  EXPECT_CONTAINS(message, "remove or repair the link");
  files::remove(files::join(root, "cat", "gone.png"));
  message = error_of<DatasetError>([&] { ImageFolder(root, ImageFolderOptions(8)); });
  EXPECT_CONTAINS(message, "dog/a: a symbolic link to b that loops");
  make_link("nowhere.png", files::join(root, "cat", "gone.png"));
  const ImageFolder skipping(root, ImageFolderOptions(8).skip_unreadable(true));
  EXPECT_EQ(skipping.size(), 4);
  ASSERT_EQ(skipping.scan_notes().size(), 3U);
  EXPECT_CONTAINS(skipping.scan_notes()[0], "gone.png: a symbolic link to nowhere.png that leads nowhere (dangling): skipped");
}

TEST(ImageFolderLinks, ADanglingClassLinkIsReportedToo) {
  TempDir dir;
  const std::string root = write_folder(dir);
  make_link("missing", files::join(root, "eel"));
  EXPECT_CONTAINS(error_of<DatasetError>([&] { ImageFolder(root, ImageFolderOptions(8)); }),
                  "photos/eel: a symbolic link to missing that leads nowhere");
}

}  // namespace
}  // namespace colo::data
