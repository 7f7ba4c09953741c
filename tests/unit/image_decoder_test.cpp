// ImageFolder's decoder option (issue 38): its names, and what it does where nvJPEG cannot run (a
// CPU build, a CPU device): auto falls back to the CPU decoder with exactly its batches, and
// nvjpeg asked for is an error saying why. The nvJPEG decoder itself is tested on a GPU
// (tests/gpu/nvjpeg_test.cpp).
#include <colo/data/data_loader.h>
#include <colo/data/image_codec.h>
#include <colo/data/image_folder.h>
#include <colo/files/files.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "temporary_directory.h"

namespace colo::data {
namespace {

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "expected \"" << (part) << "\" in: " << (text)

// Two classes of JPEGs and one PNG, of a few sizes: enough for crops, flips and a fallback.
struct Photos {
  colo::testing::TemporaryDirectory dir;
  Photos() {
    for (int c = 0; c < 2; ++c) {
      const std::string class_dir = dir / (c == 0 ? "cat" : "dog");
      files::create_directories(class_dir);
      for (int k = 0; k < 3; ++k) {
        const int64_t h = 37 + 11 * k, w = 52 + 7 * c;
        std::vector<uint8_t> rgb(static_cast<size_t>(h * w * 3));
        for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>((i * (7 + c) + k * 31) % 251);
        const std::string base = files::join(class_dir, std::to_string(k));
        if (k == 2) {
          write_png(base + ".png", rgb.data(), h, w);
        } else {
          write_jpeg(base + ".jpg", rgb.data(), h, w, 90);
        }
      }
    }
  }
};

TEST(ImageDecoderTest, NamesParseAndUnknownOnesListTheChoices) {
  EXPECT_EQ(parse_image_decoder("cpu"), ImageDecoder::kCpu);
  EXPECT_EQ(parse_image_decoder("nvjpeg"), ImageDecoder::kNvjpeg);
  EXPECT_EQ(parse_image_decoder("auto"), ImageDecoder::kAuto);
  for (const auto d : {ImageDecoder::kCpu, ImageDecoder::kNvjpeg, ImageDecoder::kAuto}) {
    EXPECT_EQ(parse_image_decoder(to_string(d)), d);
  }
  try {
    parse_image_decoder("gpu");
    FAIL() << "gpu accepted";
  } catch (const std::invalid_argument& e) {
    for (const char* part : {"'gpu'", "cpu", "nvjpeg", "auto"}) EXPECT_CONTAINS(e.what(), part);
  }
  EXPECT_EQ(ImageFolderOptions(32).decoder(), ImageDecoder::kCpu) << "the CPU decoder stays the default";
}

// Where this build has no nvJPEG, decoder nvjpeg is refused when the folder is opened, saying why
// and what falls back instead.
TEST(ImageDecoderTest, NvjpegAskedForWithoutNvjpegIsAnError) {
  if (nvjpeg_compiled()) GTEST_SKIP() << "this build has nvJPEG";
  Photos photos;
  try {
    ImageFolder folder(photos.dir.path(), ImageFolderOptions(16).decoder(ImageDecoder::kNvjpeg));
    FAIL() << "decoder nvjpeg accepted by a build without nvJPEG";
  } catch (const std::invalid_argument& e) {
    for (const char* part : {"decoder nvjpeg", "no nvJPEG", "nvidia-nvjpeg", "COLO_NVJPEG_ROOT", "decoder auto"}) {
      EXPECT_CONTAINS(e.what(), part);
    }
  }
}

// A loader that delivers to the CPU cannot use nvJPEG: decoder nvjpeg is one of the loader's
// errors (checked where the build has nvJPEG and so accepts the folder).
TEST(ImageDecoderTest, NvjpegOnACpuLoaderIsALoaderError) {
  if (!nvjpeg_compiled()) GTEST_SKIP() << "this build refuses decoder nvjpeg when the folder is opened";
  Photos photos;
  auto folder = std::make_shared<ImageFolder>(photos.dir.path(), ImageFolderOptions(16).decoder(ImageDecoder::kNvjpeg));
  try {
    DataLoader loader(folder, DataLoaderOptions(2));
    FAIL() << "a CPU loader accepted decoder nvjpeg";
  } catch (const std::invalid_argument& e) {
    EXPECT_CONTAINS(e.what(), "decoder nvjpeg cannot run");
    EXPECT_CONTAINS(e.what(), "delivers to cpu");
  }
}

// auto where nvJPEG cannot run: the CPU decoder's batches, bit for bit (evaluation and training,
// through the loader, resumed mid-epoch), and a line saying so.
TEST(ImageDecoderTest, AutoFallsBackToExactlyTheCpuDecoder) {
  Photos photos;
  auto cpu = std::make_shared<ImageFolder>(photos.dir.path(), ImageFolderOptions(24));
  auto fallback = std::make_shared<ImageFolder>(photos.dir.path(), ImageFolderOptions(24).decoder(ImageDecoder::kAuto));
  const torch::Device device = torch::cuda::is_available() && !nvjpeg_compiled() ? torch::Device(torch::kCUDA, 0)
                                                                                 : torch::Device(torch::kCPU);
  if (nvjpeg_compiled() && device.is_cuda()) GTEST_SKIP() << "nvJPEG runs here: tests/gpu compares it";
  EXPECT_CONTAINS(fallback->decoder_in_use(device), "decoded on the CPU by libjpeg-turbo: decoder auto, but");
  EXPECT_CONTAINS(cpu->decoder_in_use(device), "decoder cpu");
  EXPECT_FALSE(fallback->get_device_batch({0, 1}, nullptr, torch::Device(torch::kCUDA, 0)).has_value());

  const std::vector<int64_t> all = {0, 1, 2, 3, 4, 5};
  const Batch a = cpu->get_batch(all), b = fallback->get_batch(all);
  EXPECT_TRUE(torch::equal(a.images, b.images));
  EXPECT_TRUE(torch::equal(a.labels, b.labels));
  auto epoch = [&](const std::shared_ptr<ImageFolder>& data, DataLoaderState start) {
    DataLoader loader(data, DataLoaderOptions(2).shuffle(true).augment(true).seed(5).num_workers(2).device(device));
    loader.load_state(start);
    std::vector<Batch> out;
    while (auto batch = loader.next()) out.push_back({batch->images.cpu(), batch->labels.cpu()});
    return out;
  };
  const auto expected = epoch(cpu, {1, 0});
  const auto got = epoch(fallback, {1, 0});
  const auto resumed = epoch(fallback, {1, 1});
  ASSERT_EQ(expected.size(), 3U);
  ASSERT_EQ(got.size(), 3U);
  ASSERT_EQ(resumed.size(), 2U);
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_TRUE(torch::equal(expected[i].images, got[i].images)) << i;
    EXPECT_TRUE(torch::equal(expected[i].labels, got[i].labels)) << i;
  }
  for (size_t i = 0; i < resumed.size(); ++i) EXPECT_TRUE(torch::equal(expected[i + 1].images, resumed[i].images)) << i;
}

}  // namespace
}  // namespace colo::data
