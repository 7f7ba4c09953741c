// colo::data's images: the JPEG/PNG codecs (round trips, partial and scaled JPEG decoding, corrupt
// files), the resampling filter against LibTorch's antialiased interpolate, torchvision's crop
// boxes, and ImageFolder on folders generated here (classes, labels, transforms' shapes and
// statistics, corrupt files, sharding, worker threads, resuming).
#include <colo/files/files.h>
#include <colo/data/data_loader.h>
#include <colo/data/dataset_error.h>
#include <colo/data/image_codec.h>
#include <colo/data/image_folder.h>
#include <colo/data/image_resample.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "temporary_directory.h"

// After <cstdio>: jpeglib.h uses FILE without including it.
#include <jpeglib.h>

namespace colo::data {
namespace {

using TempDir = colo::testing::TemporaryDirectory;

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "expected \"" << (part) << "\" in: " << (text)

// A smooth RGB test picture (gradients and a few waves: JPEG keeps it well) with a given tint.
std::vector<uint8_t> picture(int64_t height, int64_t width, int tint = 0) {
  std::vector<uint8_t> rgb(static_cast<size_t>(height * width * 3));
  for (int64_t y = 0; y < height; ++y) {
    for (int64_t x = 0; x < width; ++x) {
      uint8_t* p = rgb.data() + (y * width + x) * 3;
      p[0] = static_cast<uint8_t>((255 * x) / std::max<int64_t>(1, width - 1));
      p[1] = static_cast<uint8_t>((255 * y) / std::max<int64_t>(1, height - 1));
      p[2] = static_cast<uint8_t>(std::clamp(128 + tint + 60 * std::sin(0.15 * static_cast<double>(x + y)), 0.0, 255.0));
    }
  }
  return rgb;
}

std::vector<uint8_t> solid(int64_t height, int64_t width, uint8_t r, uint8_t g, uint8_t b) {
  std::vector<uint8_t> rgb(static_cast<size_t>(height * width * 3));
  for (size_t i = 0; i < rgb.size(); i += 3) rgb[i] = r, rgb[i + 1] = g, rgb[i + 2] = b;
  return rgb;
}

// Pixels as a float [3, H, W] tensor in [0, 1].
torch::Tensor to_chw(const std::vector<uint8_t>& rgb, int64_t height, int64_t width) {
  return torch::from_blob(const_cast<uint8_t*>(rgb.data()), {height, width, 3}, torch::kUInt8)
      .permute({2, 0, 1})
      .to(torch::kFloat)
      .div(255.0);
}

double mean_abs_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += std::abs(static_cast<int>(a[i]) - static_cast<int>(b[i]));
  return sum / static_cast<double>(a.size());
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream file(path, std::ios::binary);
  file.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// ---------------------------------------------------------------------------------------------
// Codecs

TEST(ImageCodecTest, PngRoundTripIsExact) {
  TempDir dir;
  const auto rgb = picture(23, 31);
  write_png(dir / "a.png", rgb.data(), 23, 31);
  const auto bytes = read_binary_file(dir / "a.png");
  const ImageInfo info = read_image_info(bytes.data(), bytes.size(), "a.png");
  EXPECT_EQ(info.format, ImageFormat::kPng);
  EXPECT_EQ(info.height, 23);
  EXPECT_EQ(info.width, 31);
  const DecodedImage image = decode_image(bytes.data(), bytes.size(), "a.png");
  ASSERT_EQ(image.height, 23);
  ASSERT_EQ(image.width, 31);
  EXPECT_EQ(image.pixels, rgb);
}

TEST(ImageCodecTest, JpegRoundTripIsClose) {
  TempDir dir;
  const auto rgb = picture(64, 80);
  write_jpeg(dir / "a.jpg", rgb.data(), 64, 80, 95);
  const auto bytes = read_binary_file(dir / "a.jpg");
  const DecodedImage image = decode_image(bytes.data(), bytes.size(), "a.jpg");
  EXPECT_EQ(image.full.format, ImageFormat::kJpeg);
  ASSERT_EQ(image.height, 64);
  ASSERT_EQ(image.width, 80);
  EXPECT_EQ(image.scale, 1.0);
  EXPECT_LT(mean_abs_difference(image.pixels, rgb), 3.0);
}

// A CMYK JPEG as Photoshop writes them (libjpeg adds the Adobe marker; samples inverted: 255 is no
// ink), in memory. `inverted` is height x width x 4.
std::vector<uint8_t> cmyk_jpeg(const std::vector<uint8_t>& inverted, int height, int width) {
  jpeg_compress_struct c{};
  jpeg_error_mgr errors{};
  c.err = jpeg_std_error(&errors);
  jpeg_create_compress(&c);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buffer, &size);
  c.image_width = static_cast<JDIMENSION>(width);
  c.image_height = static_cast<JDIMENSION>(height);
  c.input_components = 4;
  c.in_color_space = JCS_CMYK;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 95, TRUE);
  jpeg_start_compress(&c, TRUE);
  for (int y = 0; y < height; ++y) {
    auto* row = const_cast<JSAMPROW>(inverted.data() + static_cast<size_t>(y) * width * 4);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  std::vector<uint8_t> bytes(buffer, buffer + size);
  jpeg_destroy_compress(&c);
  std::free(buffer);
  return bytes;
}

// CMYK (and YCCK) JPEGs come out as RGB the way PIL's convert("RGB") makes them:
// R = (255 - C)(255 - K) / 255 with the ink amounts, i.e. the inverted samples multiplied.
TEST(ImageCodecTest, CmykJpegDecodesAsPilConvertsIt) {
  const int height = 32, width = 40;
  const auto rgb = picture(height, width);
  std::vector<uint8_t> inverted, expected;
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const uint8_t* p = rgb.data() + (static_cast<size_t>(y) * width + x) * 3;
      const int k = 255 - 4 * x;  // inverted K: from no black ink on the left to some on the right
      for (int ch = 0; ch < 3; ++ch) {
        inverted.push_back(p[ch]);
        expected.push_back(static_cast<uint8_t>(p[ch] * k / 255));
      }
      inverted.push_back(static_cast<uint8_t>(k));
    }
  }
  const auto bytes = cmyk_jpeg(inverted, height, width);
  const DecodedImage image = decode_image(bytes.data(), bytes.size(), "cmyk.jpg");
  ASSERT_EQ(image.height, height);
  ASSERT_EQ(image.width, width);
  EXPECT_LT(mean_abs_difference(image.pixels, expected), 3.0);
  // Not read as if the samples were ink amounts: that would come out as the negative.
  std::vector<uint8_t> negative;
  for (const auto v : expected) negative.push_back(static_cast<uint8_t>(255 - v));
  EXPECT_GT(mean_abs_difference(image.pixels, negative), 40.0);
}

TEST(ImageCodecTest, JpegRegionEqualsTheCropOfTheWholeImage) {
  TempDir dir;
  const auto rgb = picture(120, 160);
  write_jpeg(dir / "a.jpg", rgb.data(), 120, 160, 90);
  const auto bytes = read_binary_file(dir / "a.jpg");
  const DecodedImage whole = decode_image(bytes.data(), bytes.size(), "a.jpg");
  DecodeRegion region;
  region.top = 37;
  region.left = 45;
  region.height = 50;
  region.width = 70;
  const DecodedImage part = decode_image(bytes.data(), bytes.size(), "a.jpg", region);
  // Rows exactly; columns from a block boundary at or before the region's left edge.
  EXPECT_EQ(part.top, 37);
  EXPECT_LE(part.left, 45);
  EXPECT_GE(part.left + part.width, 45 + 70);
  EXPECT_EQ(part.height, 50);
  EXPECT_LT(part.width, 160) << "columns outside the region were decoded";
  std::vector<uint8_t> crop;
  for (int64_t y = 0; y < part.height; ++y) {
    const auto* row = whole.pixels.data() + ((part.top + y) * whole.width + part.left) * 3;
    crop.insert(crop.end(), row, row + part.width * 3);
  }
  EXPECT_LT(mean_abs_difference(part.pixels, crop), 0.5);
}

TEST(ImageCodecTest, JpegDecodesAtAReducedScaleWhenAllowed) {
  TempDir dir;
  const auto rgb = picture(128, 192);
  write_jpeg(dir / "a.jpg", rgb.data(), 128, 192, 95);
  const auto bytes = read_binary_file(dir / "a.jpg");
  DecodeRegion region;
  region.min_scale = 0.3;  // 1/2 is allowed, 1/4 is not
  const DecodedImage half = decode_image(bytes.data(), bytes.size(), "a.jpg", region);
  EXPECT_EQ(half.scale, 0.5);
  ASSERT_EQ(half.height, 64);
  ASSERT_EQ(half.width, 96);
  // Each half-scale pixel is close to the mean of its 2x2 block of the original.
  auto reference = torch::avg_pool2d(to_chw(rgb, 128, 192).unsqueeze(0), 2).squeeze(0);
  auto decoded = to_chw(half.pixels, 64, 96);
  EXPECT_LT((decoded - reference).abs().mean().item<double>(), 3.0 / 255.0);
}

TEST(ImageCodecTest, CorruptFilesAreErrorsNamingTheFile) {
  TempDir dir;
  const auto rgb = picture(64, 64);
  write_jpeg(dir / "good.jpg", rgb.data(), 64, 64, 90);
  auto bytes = read_binary_file(dir / "good.jpg");
  auto expect_error = [&](const std::vector<uint8_t>& data, const std::string& name, const std::string& what) {
    try {
      decode_image(data.data(), data.size(), name);
      ADD_FAILURE() << name << " decoded";
    } catch (const DatasetError& error) {
      EXPECT_CONTAINS(error.what(), name);
      EXPECT_CONTAINS(error.what(), what);
    }
  };
  expect_error(std::vector<uint8_t>(bytes.begin(), bytes.begin() + static_cast<long>(bytes.size() / 2)),
               "truncated.jpg", "JPEG");
  expect_error({}, "empty.jpg", "empty");
  expect_error({'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd', '!'}, "text.jpg", "not a JPEG or PNG");
  write_png(dir / "good.png", rgb.data(), 64, 64);
  auto png = read_binary_file(dir / "good.png");
  expect_error(std::vector<uint8_t>(png.begin(), png.begin() + 60), "truncated.png", "PNG");
  EXPECT_THROW(read_binary_file(dir / "missing.jpg"), DatasetError);
}

// ---------------------------------------------------------------------------------------------
// Resampling and crop boxes

TEST(ImageResampleTest, EqualsCropThenAntialiasedInterpolate) {
  torch::manual_seed(0);
  const int64_t height = 41, width = 57;
  const auto pixels_tensor = torch::randint(0, 256, {height, width, 3}, torch::kUInt8);
  const std::vector<uint8_t> pixels(pixels_tensor.data_ptr<uint8_t>(), pixels_tensor.data_ptr<uint8_t>() + height * width * 3);
  const auto chw = to_chw(pixels, height, width);
  namespace F = torch::nn::functional;
  for (const auto& [out_h, out_w] : std::vector<std::pair<int64_t, int64_t>>{{12, 9}, {16, 16}, {50, 70}}) {
    const CropBox box{5, 7, 30, 40};
    std::vector<float> out(static_cast<size_t>(3 * out_h * out_w));
    resample_rgb(pixels.data(), height, width, box, {5, 7, 35, 47}, out_h, out_w, false, out.data());
    const auto ours = torch::from_blob(out.data(), {3, out_h, out_w}, torch::kFloat).clone();
    const auto crop = chw.narrow(1, 5, 30).narrow(2, 7, 40).unsqueeze(0);
    const auto reference = F::interpolate(crop, F::InterpolateFuncOptions()
                                                    .size(std::vector<int64_t>{out_h, out_w})
                                                    .mode(torch::kBilinear)
                                                    .align_corners(false)
                                                    .antialias(true))
                               .squeeze(0)
                               .clamp(0, 1);
    EXPECT_LT((ours - reference).abs().max().item<double>(), 1e-5) << out_h << "x" << out_w;
    // Flipped: the mirror image.
    resample_rgb(pixels.data(), height, width, box, {5, 7, 35, 47}, out_h, out_w, true, out.data());
    const auto flipped = torch::from_blob(out.data(), {3, out_h, out_w}, torch::kFloat).clone();
    EXPECT_TRUE(torch::equal(flipped, ours.flip({2})));
  }
  // Bounds = the image: resize the whole image, then crop (torchvision's Resize + CenterCrop).
  const CropBox box = resize_center_crop_box(height, width, 20, 16);
  std::vector<float> out(3 * 16 * 16);
  resample_rgb(pixels.data(), height, width, box, {0, 0, height, width}, 16, 16, false, out.data());
  const int64_t resized_w = 20 * width / height;  // 27
  const auto resized = F::interpolate(chw.unsqueeze(0), F::InterpolateFuncOptions()
                                                            .size(std::vector<int64_t>{20, resized_w})
                                                            .mode(torch::kBilinear)
                                                            .align_corners(false)
                                                            .antialias(true));
  const auto reference = resized.squeeze(0).narrow(1, 2, 16).narrow(2, 6, 16).clamp(0, 1);  // round(5.5) = 6
  const auto ours = torch::from_blob(out.data(), {3, 16, 16}, torch::kFloat);
  EXPECT_LT((ours - reference).abs().max().item<double>(), 1e-5);
}

TEST(ImageResampleTest, ResizeCenterCropBoxIsTorchvisions) {
  // 375x500 -> Resize(256) = 256x341 -> CenterCrop(224) at top 16, left round(58.5) = 58.
  const CropBox box = resize_center_crop_box(375, 500, 256, 224);
  EXPECT_NEAR(box.top, 16 * 375.0 / 256, 1e-9);
  EXPECT_NEAR(box.left, 58 * 500.0 / 341, 1e-9);
  EXPECT_NEAR(box.height, 224 * 375.0 / 256, 1e-9);
  EXPECT_NEAR(box.width, 224 * 500.0 / 341, 1e-9);
  const CropBox portrait = resize_center_crop_box(500, 375, 256, 224);
  EXPECT_NEAR(portrait.top, 58 * 500.0 / 341, 1e-9);
  EXPECT_NEAR(portrait.left, 16 * 375.0 / 256, 1e-9);
}

TEST(ImageResampleTest, RandomResizedCropBoxesFollowTheirDistribution) {
  const RandomResizedCropParams params;
  const int64_t height = 375, width = 500;
  std::vector<double> areas;
  std::set<std::tuple<double, double, double, double>> distinct;
  for (uint64_t seed = 0; seed < 4000; ++seed) {
    const CropBox box = random_resized_crop_box(height, width, params, seed);
    ASSERT_GE(box.top, 0);
    ASSERT_GE(box.left, 0);
    ASSERT_LE(box.top + box.height, height);
    ASSERT_LE(box.left + box.width, width);
    const double area = box.height * box.width / (height * width);
    const double ratio = box.width / box.height;
    EXPECT_GE(area, 0.07);
    EXPECT_GE(ratio, 0.74);
    EXPECT_LE(ratio, 1.35);
    areas.push_back(area);
    distinct.emplace(box.top, box.left, box.height, box.width);
    const CropBox again = random_resized_crop_box(height, width, params, seed);
    ASSERT_EQ(again.top, box.top);
    ASSERT_EQ(again.width, box.width);
  }
  EXPECT_GT(distinct.size(), 3900U);
  std::sort(areas.begin(), areas.end());
  // Uniform in [0.08, 1] but for draws too wide or tall for the image, which are drawn again
  // (large areas are rejected more often): from near 0.08 to near 1, the median below the
  // uniform's 0.54.
  EXPECT_LT(areas[40], 0.1);
  EXPECT_GT(areas[3960], 0.85);
  EXPECT_GT(areas[2000], 0.35);
  EXPECT_LT(areas[2000], 0.54);
  // The fallback (ten misses): a centred box of the allowed aspect nearest the image's.
  RandomResizedCropParams narrow;
  narrow.min_scale = narrow.max_scale = 1.0;
  narrow.min_ratio = narrow.max_ratio = 1.0;
  const CropBox fallback = random_resized_crop_box(100, 300, narrow, 7);
  EXPECT_EQ(fallback.height, 100);
  EXPECT_EQ(fallback.width, 100);
  EXPECT_EQ(fallback.left, 100);
}

// ---------------------------------------------------------------------------------------------
// ImageFolder

// A folder of `per_class` images per class; image k of class c is a solid colour that encodes
// (c, k), of a size that varies, JPEG or PNG by turns, some in a nested directory.
struct GeneratedFolder {
  TempDir dir;
  std::vector<std::string> classes{"ant", "cat", "dog"};  // sorted already
  int64_t per_class = 4;

  static uint8_t red(int64_t cls) { return static_cast<uint8_t>(40 + 80 * cls); }
  static uint8_t green(int64_t k) { return static_cast<uint8_t>(30 + 50 * k); }

  GeneratedFolder() {
    // Created in the order dog, ant, cat: the labels must come from the sorted names.
    for (const int64_t c : {2, 0, 1}) {
      const std::string class_dir = dir / classes[static_cast<size_t>(c)];
      files::create_directories(files::join(class_dir, "nested"));
      for (int64_t k = 0; k < per_class; ++k) {
        const int64_t h = 40 + 9 * k, w = 56 + 13 * c;
        const auto rgb = solid(h, w, red(c), green(k), 100);
        // k = 3 lives in nested/, which sorts after the class directory's own files.
        const std::string base = k == 3 ? files::join(class_dir, "nested", "img3") : files::join(class_dir, "img" + std::to_string(k));
        if (k % 2 == 0) {
          write_png(base + ".PNG", rgb.data(), h, w);
        } else {
          write_jpeg(base + ".jpg", rgb.data(), h, w, 95);
        }
      }
      write_bytes(files::join(class_dir, "notes.txt"), {'h', 'i'});
    }
    files::create_directories(dir / ".ipynb_checkpoints");
  }
};

// Which (class, k) an evaluation image shows, from its colour.
std::pair<int64_t, int64_t> identify(const torch::Tensor& image) {
  const double r = image[0].mean().item<double>() * 255;
  const double g = image[1].mean().item<double>() * 255;
  return {std::lround((r - 40) / 80), std::lround((g - 30) / 50)};
}

TEST(ImageFolderTest, ClassesLabelsAndOrderAreTorchvisions) {
  GeneratedFolder folder;
  ImageFolder data(folder.dir.path(), ImageFolderOptions(32));
  EXPECT_EQ(data.classes(), folder.classes);
  ASSERT_EQ(data.size(), 12);
  EXPECT_EQ(data.num_classes(), 3);
  EXPECT_EQ(data.image_shape(), (ImageShape{3, 32, 32}));
  EXPECT_EQ(files::file_name(data.path(0)), "img0.PNG");
  EXPECT_EQ(files::file_name(data.path(3)), "img3.jpg");  // nested/ after the class's own files
  EXPECT_CONTAINS(data.path(3), "nested");
  std::vector<int64_t> all(12);
  for (int64_t i = 0; i < 12; ++i) all[static_cast<size_t>(i)] = i;
  const Batch batch = data.get_batch(all);
  ASSERT_EQ(batch.images.sizes(), (std::vector<int64_t>{12, 3, 32, 32}));
  for (int64_t i = 0; i < 12; ++i) {
    EXPECT_EQ(batch.labels[i].item<int64_t>(), i / 4);
    EXPECT_EQ(data.label(i), i / 4);
    const auto [cls, k] = identify(batch.images[i]);
    EXPECT_EQ(cls, i / 4) << data.path(i);
    EXPECT_EQ(k, i % 4) << data.path(i);
    // A solid colour stays solid through resize and crop.
    EXPECT_LT((batch.images[i][0] - batch.images[i][0].mean()).abs().max().item<double>(), 2.0 / 255);
  }
}

TEST(ImageFolderTest, BadFoldersAreErrorsNamingWhatToFix) {
  TempDir dir;
  try {
    ImageFolder missing(dir / "nope");
    ADD_FAILURE();
  } catch (const DatasetError& e) {
    EXPECT_CONTAINS(e.what(), "nope");
    EXPECT_CONTAINS(e.what(), "no such directory");
  }
  try {
    ImageFolder empty(dir.path());
    ADD_FAILURE();
  } catch (const DatasetError& e) {
    EXPECT_CONTAINS(e.what(), "no class directories");
  }
  files::create_directories(dir / "zebra");
  files::create_directories(dir / "cat");
  const auto rgb = solid(8, 8, 1, 2, 3);
  write_png(files::join(dir / "cat", "a.png"), rgb.data(), 8, 8);
  try {
    ImageFolder one_empty(dir.path());
    ADD_FAILURE();
  } catch (const DatasetError& e) {
    EXPECT_CONTAINS(e.what(), "1 of 2 class directories hold no");
    EXPECT_CONTAINS(e.what(), "zebra");
  }
  EXPECT_THROW(ImageFolder(dir.path(), ImageFolderOptions(0)), std::invalid_argument);
}

TEST(ImageFolderTest, TrainingTransformCropsFlipsAndIsAFunctionOfTheSeed) {
  TempDir dir;
  files::create_directories(dir / "only");
  // Left half dark, right half bright: a flip swaps the halves' means.
  const int64_t h = 60, w = 80;
  auto rgb = solid(h, w, 20, 20, 20);
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = w / 2; x < w; ++x) std::fill_n(rgb.data() + (y * w + x) * 3, 3, 230);
  }
  write_png(files::join(dir / "only", "a.png"), rgb.data(), h, w);
  ImageFolder data(dir.path(), ImageFolderOptions(24));
  int flips = 0;
  std::set<double> crops;
  const int draws = 400;
  for (uint64_t seed = 0; seed < static_cast<uint64_t>(draws); ++seed) {
    const Batch batch = data.get_augmented_batch({0}, {seed});
    ASSERT_EQ(batch.images.sizes(), (std::vector<int64_t>{1, 3, 24, 24}));
    const auto image = batch.images[0];
    const double left = image.narrow(2, 0, 4).mean().item<double>();
    const double right = image.narrow(2, 20, 4).mean().item<double>();
    if (left > right + 0.01) ++flips;
    crops.insert(image.sum().item<double>());
    EXPECT_TRUE(torch::equal(data.get_augmented_batch({0}, {seed}).images, batch.images)) << seed;
  }
  // About half are flipped (binomial: 200 +- 10 standard deviation; crops wholly in one half have
  // equal sides and count as unflipped).
  EXPECT_GT(flips, 140);
  EXPECT_LT(flips, 240);
  EXPECT_GT(crops.size(), 300U) << "the crops hardly vary";
  // The evaluation transform is fixed: the centre, unflipped.
  const auto eval = data.get_batch({0}).images[0];
  EXPECT_TRUE(torch::equal(eval, data.get_batch({0}).images[0]));
  EXPECT_LT(eval.narrow(2, 0, 4).mean().item<double>(), eval.narrow(2, 20, 4).mean().item<double>());
}

TEST(ImageFolderTest, LoaderNormalisesWithTheDataSetsStatistics) {
  GeneratedFolder folder;
  auto data = std::make_shared<ImageFolder>(folder.dir.path(), ImageFolderOptions(16));
  DataLoader loader(data, DataLoaderOptions(12));
  const Batch batch = *loader.next();
  const auto mean = ImageFolderOptions::imagenet_normalization().mean;
  const auto stdev = ImageFolderOptions::imagenet_normalization().std;
  for (int64_t i = 0; i < 12; ++i) {
    const double expected_blue = (100.0 / 255 - mean[2]) / stdev[2];
    EXPECT_NEAR(batch.images[i][2].mean().item<double>(), expected_blue, 0.03);
    const double expected_red = (GeneratedFolder::red(i / 4) / 255.0 - mean[0]) / stdev[0];
    EXPECT_NEAR(batch.images[i][0].mean().item<double>(), expected_red, 0.03);
  }
  // Normalised training batches of the whole folder: about zero mean per image once the folder's
  // own statistics are given instead.
  Normalization own{{0, 0, 0}, {1, 1, 1}};
  DataLoader raw(data, DataLoaderOptions(12).normalization(own).augment(true));
  const Batch augmented = *raw.next();
  EXPECT_GE(augmented.images.min().item<double>(), 0.0);
  EXPECT_LE(augmented.images.max().item<double>(), 1.0);
}

TEST(ImageFolderTest, CorruptImageIsAnErrorOrSkippedAndCounted) {
  GeneratedFolder folder;
  // Image 5 (cat, k = 1) is cut short.
  const std::string victim = files::join(folder.dir / "cat", "img1.jpg");
  auto bytes = read_binary_file(victim);
  bytes.resize(bytes.size() / 3);
  write_bytes(victim, bytes);
  auto strict = std::make_shared<ImageFolder>(folder.dir.path(), ImageFolderOptions(16));
  DataLoader loader(strict, DataLoaderOptions(4).num_workers(2));
  EXPECT_TRUE(loader.next().has_value());  // images 0-3
  try {
    loader.next();
    ADD_FAILURE() << "the corrupt image was read";
  } catch (const DatasetError& e) {
    EXPECT_CONTAINS(e.what(), victim);
  }
  auto lenient = std::make_shared<ImageFolder>(folder.dir.path(), ImageFolderOptions(16).skip_unreadable(true));
  const Batch batch = lenient->get_batch({4, 5, 6});
  EXPECT_EQ(lenient->num_skipped(), 1);
  ASSERT_EQ(lenient->skipped_files().size(), 1U);
  EXPECT_CONTAINS(lenient->skipped_files()[0], victim);
  // Its place goes to the next image, with that image's label and pixels.
  EXPECT_EQ(batch.labels[1].item<int64_t>(), 1);
  EXPECT_EQ(identify(batch.images[1]), (std::pair<int64_t, int64_t>{1, 2}));
}

TEST(ImageFolderTest, ShardsWorkersAndResumesLikeEveryDataSet) {
  GeneratedFolder folder;
  auto data = std::make_shared<ImageFolder>(folder.dir.path(), ImageFolderOptions(16));
  // Two replicas see disjoint halves that together are the folder.
  std::set<std::pair<int64_t, int64_t>> seen;
  for (int64_t rank = 0; rank < 2; ++rank) {
    DataLoader loader(data, DataLoaderOptions(3).shuffle(true).seed(3).num_replicas(2).rank(rank).normalize(false));
    while (auto batch = loader.next()) {
      for (int64_t i = 0; i < batch->size(); ++i) {
        const auto id = identify(batch->images[i]);
        EXPECT_EQ(id.first, batch->labels[i].item<int64_t>());
        EXPECT_TRUE(seen.insert(id).second) << "seen twice: " << id.first << "," << id.second;
      }
    }
  }
  EXPECT_EQ(seen.size(), 12U);
  // Augmented batches do not depend on the worker count or prefetching, and a loader resumed
  // mid-epoch continues with the same batches.
  auto batches = [&](DataLoaderOptions options, DataLoaderState start) {
    DataLoader loader(data, options.shuffle(true).augment(true).seed(9));
    loader.load_state(start);
    std::vector<torch::Tensor> out;
    while (auto batch = loader.next()) out.push_back(batch->images);
    return out;
  };
  const auto serial = batches(DataLoaderOptions(2).prefetch(0), {1, 0});
  const auto parallel = batches(DataLoaderOptions(2).num_workers(3).prefetch(4), {1, 0});
  const auto resumed = batches(DataLoaderOptions(2).num_workers(2), {1, 2});
  ASSERT_EQ(serial.size(), 6U);
  ASSERT_EQ(parallel.size(), 6U);
  ASSERT_EQ(resumed.size(), 4U);
  for (size_t i = 0; i < serial.size(); ++i) EXPECT_TRUE(torch::equal(serial[i], parallel[i])) << i;
  for (size_t i = 0; i < resumed.size(); ++i) EXPECT_TRUE(torch::equal(serial[i + 2], resumed[i])) << i;
  EXPECT_FALSE(torch::equal(serial[0], batches(DataLoaderOptions(2), {0, 0})[0])) << "epochs should differ";
}

TEST(ImageFolderTest, LoaderCountsImagesAndWorkerTime) {
  GeneratedFolder folder;
  auto data = std::make_shared<ImageFolder>(folder.dir.path(), ImageFolderOptions(64));
  DataLoader loader(data, DataLoaderOptions(4).num_workers(2).augment(true));
  int64_t images = 0;
  while (auto batch = loader.next()) images += batch->size();
  const DataLoaderStats stats = loader.stats();
  EXPECT_EQ(stats.images, images);
  EXPECT_EQ(stats.batches, 3);
  EXPECT_GT(stats.worker_cpu_seconds, 0.0);
  EXPECT_GE(stats.wait_seconds, 0.0);
  EXPECT_THROW(DataLoader(data, DataLoaderOptions(4).num_workers(0)), std::invalid_argument);
}

}  // namespace
}  // namespace colo::data
