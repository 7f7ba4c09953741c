// ImageFolder's decoder nvjpeg (issue 38) on a GPU, against the CPU decoder (libjpeg-turbo):
//  - nvJPEG's pixels against libjpeg-turbo's for baseline 4:2:0 / 4:2:2 / 4:4:4, grayscale,
//    progressive and odd-sized JPEGs (CMYK is refused, for the CPU to decode);
//  - the resize kernel against resample_rgb on the same pixels: equal, bit for bit;
//  - whole batches (training and evaluation) against the CPU decoder's: the same labels, PNG and
//    CMYK images equal, JPEGs within the decoders' difference; a resumed loader's batches equal.
// Each comparison prints what it measured ("measured:" lines), so a failing bound shows by how much.
#include <colo/data/data_loader.h>
#include <colo/data/gpu_image_ops.h>
#include <colo/data/image_codec.h>
#include <colo/data/image_folder.h>
#include <colo/data/image_resample.h>
#include <colo/files/files.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

// After <cstdio>: jpeglib.h uses FILE without including it.
#include <jpeglib.h>

namespace colo::data {
namespace {

const torch::Device kGpu(torch::kCUDA, 0);

// The bounds, in 8-bit levels. Both decoders follow the JPEG standard, whose IDCT accuracy test
// (IEEE 1180, ITU-T T.83) allows each output sample to be off by one; libjpeg-turbo's integer
// ISLOW IDCT and nvJPEG's differ within that, and the YCbCr -> RGB conversion's rounding adds one
// more: 2 levels where no plane is upsampled (4:4:4, grayscale). Subsampled chroma is upsampled by
// libjpeg-turbo's "fancy" (triangle) filter and by nvJPEG with interpolation where it offers it
// (NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION), by replication where not: on the smooth pictures
// below the two differ by a fraction of the chroma's step between neighbouring samples, bounded
// here by 6 levels anywhere and 1 level on average.
constexpr double kFullChromaMax = 2;
constexpr double kSubsampledMax = 6;
constexpr double kMeanMax = 1.0;

// A smooth picture (gradients and slow waves), as photographs mostly are.
std::vector<uint8_t> picture(int height, int width, int tint = 0) {
  std::vector<uint8_t> rgb(static_cast<size_t>(height) * width * 3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      uint8_t* p = rgb.data() + (static_cast<size_t>(y) * width + x) * 3;
      p[0] = static_cast<uint8_t>(255 * x / std::max(1, width - 1));
      p[1] = static_cast<uint8_t>(255 * y / std::max(1, height - 1));
      p[2] = static_cast<uint8_t>(std::clamp(128.0 + tint + 60 * std::sin(0.05 * (x + 2 * y)), 0.0, 255.0));
    }
  }
  return rgb;
}

enum class Kind { k420, k422, k444, kGray, kProgressive, kCmyk };

const char* name_of(Kind kind) {
  switch (kind) {
    case Kind::k420: return "baseline 4:2:0";
    case Kind::k422: return "baseline 4:2:2";
    case Kind::k444: return "baseline 4:4:4";
    case Kind::kGray: return "grayscale";
    case Kind::kProgressive: return "progressive 4:2:0";
    case Kind::kCmyk: return "CMYK";
  }
  return "?";
}

// A JPEG of `kind` in memory, written by libjpeg-turbo at quality 90.
std::vector<uint8_t> jpeg_of(Kind kind, int height, int width) {
  const auto rgb = picture(height, width);
  jpeg_compress_struct c{};
  jpeg_error_mgr errors{};
  c.err = jpeg_std_error(&errors);
  jpeg_create_compress(&c);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buffer, &size);
  c.image_width = static_cast<JDIMENSION>(width);
  c.image_height = static_cast<JDIMENSION>(height);
  std::vector<uint8_t> samples;
  if (kind == Kind::kGray) {
    c.input_components = 1;
    c.in_color_space = JCS_GRAYSCALE;
    for (size_t i = 0; i < rgb.size(); i += 3) samples.push_back(static_cast<uint8_t>((rgb[i] + 2 * rgb[i + 1] + rgb[i + 2]) / 4));
  } else if (kind == Kind::kCmyk) {
    c.input_components = 4;
    c.in_color_space = JCS_CMYK;
    for (size_t i = 0; i < rgb.size(); i += 3) samples.insert(samples.end(), {rgb[i], rgb[i + 1], rgb[i + 2], 200});
  } else {
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    samples = rgb;
  }
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 90, TRUE);
  if (kind == Kind::k444 || kind == Kind::k422) {
    c.comp_info[0].h_samp_factor = kind == Kind::k422 ? 2 : 1;
    c.comp_info[0].v_samp_factor = 1;
  }
  if (kind == Kind::kProgressive) jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  const int row = width * c.input_components;
  for (int y = 0; y < height; ++y) {
    auto* line = const_cast<JSAMPROW>(samples.data() + static_cast<size_t>(y) * row);
    jpeg_write_scanlines(&c, &line, 1);
  }
  jpeg_finish_compress(&c);
  std::vector<uint8_t> bytes(buffer, buffer + size);
  jpeg_destroy_compress(&c);
  std::free(buffer);
  return bytes;
}

class Nvjpeg : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU";
    if (!nvjpeg_compiled()) GTEST_SKIP() << "this build has no nvJPEG (see the configure log's 'colo: nvJPEG' line)";
  }
};

TEST_F(Nvjpeg, DecodesLikeLibjpegTurbo) {
  struct Case {
    Kind kind;
    int height, width;
  };
  const std::vector<Case> cases = {{Kind::k420, 375, 500}, {Kind::k420, 37, 53},  {Kind::k422, 120, 161},
                                   {Kind::k444, 99, 131},  {Kind::kGray, 64, 77}, {Kind::kProgressive, 200, 150},
                                   {Kind::k420, 1, 1},     {Kind::kCmyk, 48, 64}};
  std::vector<std::vector<uint8_t>> files;
  for (const auto& c : cases) files.push_back(jpeg_of(c.kind, c.height, c.width));
  const auto decoded = nvjpeg_decode(files, kGpu);
  ASSERT_EQ(decoded.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const std::string what = fmt::format("{} {}x{}", name_of(c.kind), c.width, c.height);
    if (c.kind == Kind::kCmyk) {
      EXPECT_FALSE(decoded[i].pixels.defined()) << what << ": CMYK is the CPU's to convert";
      EXPECT_NE(decoded[i].error.find("4 colour components"), std::string::npos) << decoded[i].error;
      continue;
    }
    ASSERT_TRUE(decoded[i].pixels.defined()) << what << ": " << decoded[i].error;
    const DecodedImage cpu = decode_image(files[i].data(), files[i].size(), what);
    const auto expected =
        torch::from_blob(const_cast<uint8_t*>(cpu.pixels.data()), {cpu.height, cpu.width, 3}, torch::kUInt8).to(torch::kInt);
    const auto got = decoded[i].pixels.cpu().to(torch::kInt);
    ASSERT_EQ(got.sizes(), expected.sizes()) << what;
    const double max = (got - expected).abs().max().item<double>();
    const double mean = (got - expected).abs().to(torch::kDouble).mean().item<double>();
    std::printf("measured: %s (%s decoder): max |nvJPEG - libjpeg-turbo| %.0f levels, mean %.3f\n", what.c_str(),
                decoded[i].hardware ? "hardware" : "CUDA", max, mean);
    const bool full_chroma = c.kind == Kind::k444 || c.kind == Kind::kGray;
    EXPECT_LE(max, full_chroma ? kFullChromaMax : kSubsampledMax) << what;
    EXPECT_LE(mean, kMeanMax) << what;
  }
  // H100 and H200 have JPEG engines: a baseline file goes to them, a progressive one cannot.
  std::printf("measured: hardware decoder used for the 500x375 baseline file: %s\n", decoded[0].hardware ? "yes" : "no");
  EXPECT_FALSE(decoded[5].hardware) << "a progressive JPEG went to the hardware decoder";
}

TEST_F(Nvjpeg, ResizeKernelEqualsResampleRgbBitForBit) {
  const int height = 150, width = 203;
  const auto rgb = picture(height, width, 20);
  std::vector<uint8_t> noisy = rgb;
  for (size_t i = 0; i < noisy.size(); ++i) noisy[i] = static_cast<uint8_t>(noisy[i] ^ ((i * 2654435761U) >> 27));
  const auto host = torch::from_blob(noisy.data(), {height, width, 3}, torch::kUInt8);
  const auto device = host.to(kGpu);
  struct Case {
    CropBox box;
    bool whole;  // the filter may read the whole image (evaluation) or the box (training)
    bool flip;
    int64_t out;
  };
  const std::vector<Case> cases = {{{10, 20, 120, 160}, false, false, 64},  {{0, 0, 150, 203}, false, true, 64},
                                   {{33.7, 41.2, 80.5, 80.5}, true, false, 48}, {{5, 7, 20, 30}, false, true, 64},
                                   {{0, 0, 150, 203}, true, true, 224}};
  for (const auto& c : cases) {
    const PixelBounds bounds =
        c.whole ? PixelBounds{0, 0, height, width}
                : PixelBounds{static_cast<int64_t>(std::floor(c.box.top)), static_cast<int64_t>(std::floor(c.box.left)),
                              static_cast<int64_t>(std::ceil(c.box.top + c.box.height)),
                              static_cast<int64_t>(std::ceil(c.box.left + c.box.width))};
    auto expected = torch::empty({3, c.out, c.out}, torch::kFloat);
    resample_rgb(noisy.data(), height, width, c.box, bounds, c.out, c.out, c.flip, expected.data_ptr<float>());
    const auto got = resample_rgb_on_device(device, c.box, bounds, c.out, c.out, c.flip).cpu();
    EXPECT_TRUE(torch::equal(got, expected)) << "box " << c.box.top << "," << c.box.left << " " << c.box.height << "x"
                                             << c.box.width << " out " << c.out << ": max difference "
                                             << (got - expected).abs().max().item<float>();
  }
}

// A folder of JPEGs of every kind, a PNG and a CMYK JPEG, small enough that the CPU decoder decodes
// at full scale (it shrinks by DCT scaling where a crop is at least twice the output size; nvJPEG
// decodes whole: see BoundsTheLargeImageDifference).
struct Folder {
  files::TemporaryDirectory dir{"colo_nvjpeg_"};
  Folder() {
    const std::vector<Kind> kinds = {Kind::k420, Kind::k444, Kind::kGray, Kind::kProgressive, Kind::k422, Kind::kCmyk};
    for (int c = 0; c < 3; ++c) {
      const std::string class_dir = files::join(dir.path(), fmt::format("class{}", c));
      files::create_directories(class_dir);
      for (size_t k = 0; k < kinds.size(); ++k) {
        const int h = 90 + 7 * static_cast<int>(k) + c, w = 110 - 5 * static_cast<int>(k) + 3 * c;
        const auto bytes = jpeg_of(kinds[k], h, w);
        std::FILE* f = std::fopen(files::join(class_dir, fmt::format("{}.jpg", k)).c_str(), "wb");
        std::fwrite(bytes.data(), 1, bytes.size(), f);
        std::fclose(f);
      }
      const auto rgb = picture(70 + c, 95);
      write_png(files::join(class_dir, "z.png"), rgb.data(), 70 + c, 95);
    }
  }
};

// The images of one batch that are not exactly equal, and the largest difference in levels.
void compare(const Batch& gpu, const Batch& cpu, const std::vector<bool>& exact, const std::string& what) {
  ASSERT_TRUE(torch::equal(gpu.labels.cpu(), cpu.labels)) << what;
  const auto got = gpu.images.cpu();
  double worst = 0;
  for (int64_t i = 0; i < got.size(0); ++i) {
    const double max = (got[i] - cpu.images[i]).abs().max().item<double>() * 255;
    if (exact[static_cast<size_t>(i)]) {
      EXPECT_TRUE(torch::equal(got[i], cpu.images[i])) << what << " image " << i << " (PNG or CMYK: the CPU's)";
    } else {
      // A convex combination of pixels each within the decoders' difference.
      EXPECT_LE(max, kSubsampledMax + 1e-3) << what << " image " << i;
      worst = std::max(worst, max);
    }
  }
  std::printf("measured: %s: max |GPU - CPU decoder| over JPEGs %.3f levels\n", what.c_str(), worst);
}

TEST_F(Nvjpeg, BatchesMatchTheCpuDecoder) {
  Folder folder;
  const ImageFolder cpu(folder.dir.path(), ImageFolderOptions(64));
  const ImageFolder gpu(folder.dir.path(), ImageFolderOptions(64).decoder(ImageDecoder::kNvjpeg));
  std::printf("measured: %s\n", gpu.decoder_in_use(kGpu).c_str());
  std::vector<int64_t> all(static_cast<size_t>(cpu.size()));
  std::vector<uint64_t> seeds;
  std::vector<bool> exact;
  for (int64_t i = 0; i < cpu.size(); ++i) {
    all[static_cast<size_t>(i)] = i;
    seeds.push_back(1000 + 7 * static_cast<uint64_t>(i));
    // 5.jpg is CMYK, z.png the PNG: decoded on the CPU in both.
    const std::string& path = cpu.path(i);
    exact.push_back(path.find("z.png") != std::string::npos || path.find("5.jpg") != std::string::npos);
  }
  const auto train = gpu.get_device_batch(all, &seeds, kGpu);
  ASSERT_TRUE(train.has_value());
  EXPECT_TRUE(train->images.is_cuda());
  compare(*train, cpu.get_augmented_batch(all, seeds), exact, "training batch (RandomResizedCrop + flip)");
  const auto eval = gpu.get_device_batch(all, nullptr, kGpu);
  ASSERT_TRUE(eval.has_value());
  compare(*eval, cpu.get_batch(all), exact, "evaluation batch (resize + centre crop)");
}

// Where the CPU decoder shrinks by DCT scaling (a crop at least twice the output size), nvJPEG's
// path filters the full image instead (as PIL and torchvision do): a different, not a worse,
// picture. Measured, and bounded loosely on average.
TEST_F(Nvjpeg, BoundsTheLargeImageDifference) {
  files::TemporaryDirectory dir("colo_nvjpeg_large_");
  files::create_directories(files::join(dir.path(), "a"));
  const auto rgb = picture(750, 1000);
  write_jpeg(files::join(dir.path(), "a", "big.jpg"), rgb.data(), 750, 1000, 90);
  const ImageFolder cpu(dir.path(), ImageFolderOptions(64));
  const ImageFolder gpu(dir.path(), ImageFolderOptions(64).decoder(ImageDecoder::kNvjpeg));
  const auto got = gpu.get_device_batch({0}, nullptr, kGpu)->images.cpu();
  const auto expected = cpu.get_batch({0}).images;
  const double max = (got - expected).abs().max().item<double>() * 255;
  const double mean = (got - expected).abs().mean().item<double>() * 255;
  std::printf("measured: 1000x750 evaluated at 64 (CPU: DCT-scaled by 1/8): max %.2f levels, mean %.3f\n", max, mean);
  EXPECT_LE(mean, 2.0);
}

TEST_F(Nvjpeg, LoaderResumesWithTheSameBatchesAndLabels) {
  Folder folder;
  auto gpu = std::make_shared<ImageFolder>(folder.dir.path(), ImageFolderOptions(32).decoder(ImageDecoder::kNvjpeg));
  auto cpu = std::make_shared<ImageFolder>(folder.dir.path(), ImageFolderOptions(32));
  auto epoch = [&](const std::shared_ptr<ImageFolder>& data, DataLoaderState start, int64_t workers) {
    DataLoader loader(data, DataLoaderOptions(4).shuffle(true).augment(true).seed(11).num_workers(workers).device(kGpu));
    loader.load_state(start);
    std::vector<Batch> out;
    while (auto batch = loader.next()) out.push_back({batch->images.cpu(), batch->labels.cpu()});
    return out;
  };
  const auto whole = epoch(gpu, {2, 0}, 2);
  const auto resumed = epoch(gpu, {2, 2}, 3);
  const auto reference = epoch(cpu, {2, 0}, 2);
  ASSERT_EQ(whole.size(), 6U);
  ASSERT_EQ(resumed.size(), 4U);
  ASSERT_EQ(reference.size(), 6U);
  for (size_t i = 0; i < resumed.size(); ++i) {
    EXPECT_TRUE(torch::equal(whole[i + 2].images, resumed[i].images)) << i;
    EXPECT_TRUE(torch::equal(whole[i + 2].labels, resumed[i].labels)) << i;
  }
  double worst = 0;
  for (size_t i = 0; i < whole.size(); ++i) {
    EXPECT_TRUE(torch::equal(whole[i].labels, reference[i].labels)) << i;
    // Normalised: levels / 255 / std, at most at most 1 / 0.224 x the pixels' difference.
    worst = std::max(worst, (whole[i].images - reference[i].images).abs().max().item<double>());
  }
  std::printf("measured: loader batches, max |GPU - CPU| after normalisation %.4f\n", worst);
  EXPECT_LE(worst, (kSubsampledMax + 1e-3) / 255.0 / 0.224);
  // A CPU loader cannot take decoder nvjpeg.
  EXPECT_THROW(DataLoader(gpu, DataLoaderOptions(4)), std::invalid_argument);
}

}  // namespace
}  // namespace colo::data
