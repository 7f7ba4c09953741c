#include "make_image_folder.h"

#include <colo/files/files.h>
#include <colo/data/image_codec.h>
#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <thread>
#include <vector>

namespace colo::bench {
namespace {

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// One picture: separable waves (products of 1-D tables, cheap) per channel, plus noise whose
// amplitude varies over the picture as texture does.
std::vector<uint8_t> picture(int64_t height, int64_t width, uint64_t seed) {
  constexpr int kWaves = 5;
  // Noise amplitude of textured regions, chosen so that the JPEGs are as large as ImageNet's.
  constexpr float kTexture = 140.0F;
  std::vector<float> rows(static_cast<size_t>(kWaves * 3 * height)), cols(static_cast<size_t>(kWaves * 3 * width));
  uint64_t s = seed;
  auto uniform = [&] { return static_cast<double>((s = mix(s)) >> 11) * 0x1.0p-53; };
  for (int w = 0; w < kWaves * 3; ++w) {
    const double fy = 0.002 + 0.2 * uniform() * uniform(), fx = 0.002 + 0.2 * uniform() * uniform();
    const double py = 6.283 * uniform(), px = 6.283 * uniform(), amplitude = 20 + 40 * uniform();
    for (int64_t y = 0; y < height; ++y) rows[static_cast<size_t>(w * height + y)] = static_cast<float>(amplitude * std::cos(fy * static_cast<double>(y) + py));
    for (int64_t x = 0; x < width; ++x) cols[static_cast<size_t>(w * width + x)] = static_cast<float>(std::cos(fx * static_cast<double>(x) + px));
  }
  std::vector<uint8_t> rgb(static_cast<size_t>(height * width * 3));
  uint64_t noise = mix(seed ^ 0x6e6f697365ULL);
  for (int64_t y = 0; y < height; ++y) {
    for (int64_t x = 0; x < width; ++x) {
      // Texture: strong in some regions, flat in others.
      const float texture = kTexture * (cols[static_cast<size_t>(x)] * rows[static_cast<size_t>(height + y)] > 0 ? 1.0F : 0.3F);
      for (int c = 0; c < 3; ++c) {
        float v = 128;
        for (int w = c * kWaves; w < (c + 1) * kWaves; ++w) {
          v += rows[static_cast<size_t>(w * height + y)] * cols[static_cast<size_t>(w * width + x)];
        }
        noise = noise * 6364136223846793005ULL + 1442695040888963407ULL;
        v += texture * (static_cast<float>(noise >> 40) / static_cast<float>(1 << 24) - 0.5F);
        rgb[static_cast<size_t>((y * width + x) * 3 + c)] = static_cast<uint8_t>(std::fmin(255.0F, std::fmax(0.0F, v)));
      }
    }
  }
  return rgb;
}

}  // namespace

int64_t make_image_folder(const std::string& root, const FolderSpec& spec) {
  for (int64_t c = 0; c < spec.classes; ++c) files::create_directories(files::join(root, fmt::format("c{:03}", c)));
  const int64_t total = spec.classes * spec.images_per_class;
  std::atomic<int64_t> next{0}, bytes{0};
  auto work = [&] {
    for (int64_t i = next++; i < total; i = next++) {
      const int64_t c = i / spec.images_per_class;
      // ImageNet's pictures are landscape or portrait: every third one is portrait here.
      const bool portrait = i % 3 == 2;
      const int64_t h = portrait ? spec.width : spec.height, w = portrait ? spec.height : spec.width;
      const auto rgb = picture(h, w, mix(static_cast<uint64_t>(i)));
      const std::string path = files::join(root, fmt::format("c{:03}", c), fmt::format("{:06}.JPEG", i));
      data::write_jpeg(path, rgb.data(), h, w, spec.quality);
      bytes += static_cast<int64_t>(files::file_size(path));
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < std::max(1, spec.threads); ++t) threads.emplace_back(work);
  for (auto& t : threads) t.join();
  return bytes.load();
}

}  // namespace colo::bench
