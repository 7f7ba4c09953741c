// The image operations of timm's AutoAugment and RandAugment (timm/data/auto_augment.py), done as
// Pillow does them on 8-bit images, so that an op at a magnitude gives timm's image: the same
// lookup tables (ImageOps), the same blend with its truncation (ImageEnhance, Image.blend), the
// same 3x3 smoothing with its rounding and untouched border (ImageFilter.SMOOTH), and the same
// affine resampling (Image.transform / rotate: pixel centres at +0.5, bilinear or bicubic with
// truncation, the fill colour outside the source).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace colo::data {

// An 8-bit image as PIL holds one ("L" for one channel, "RGB" for three), stored planar [C, H, W].
struct ByteImage {
  int64_t channels = 0;
  int64_t height = 0;
  int64_t width = 0;
  std::vector<uint8_t> pixels;  // channels * height * width

  ByteImage() = default;
  ByteImage(int64_t c, int64_t h, int64_t w)
      : channels(c), height(h), width(w), pixels(static_cast<size_t>(c * h * w)) {}
  uint8_t& at(int64_t c, int64_t y, int64_t x) { return pixels[static_cast<size_t>((c * height + y) * width + x)]; }
  uint8_t at(int64_t c, int64_t y, int64_t x) const {
    return pixels[static_cast<size_t>((c * height + y) * width + x)];
  }
};

// [C, H, W] floats in [0, 1] to bytes, round(255 x) clamped (the inverse of ToTensor's x / 255,
// exact for images that came from bytes), and back.
ByteImage to_byte_image(const float* chw, int64_t channels, int64_t height, int64_t width);
void from_byte_image(const ByteImage& image, float* chw);

// PIL's resampling filters for Image.transform and rotate (timm draws one of the two per op by
// default: its _RANDOM_INTERPOLATION).
enum class Resample { kBilinear, kBicubic };

// One fill value per channel (timm's img_mean; only the first is read for one channel).
using FillColor = std::array<uint8_t, 3>;

namespace pil {

ByteImage auto_contrast(const ByteImage& image);                               // ImageOps.autocontrast(image), cutoff 0
ByteImage equalize(const ByteImage& image);                                    // ImageOps.equalize
ByteImage invert(const ByteImage& image);                                      // ImageOps.invert
ByteImage solarize(const ByteImage& image, int threshold);                     // values >= threshold inverted
ByteImage solarize_add(const ByteImage& image, int add, int threshold = 128);  // timm's solarize_add
// ImageOps.posterize keeping `bits` high bits; bits >= 8 leaves the image (timm), bits <= 0 keeps
// none (black: what Pillow before 10 and TensorFlow give; Pillow 13 raises instead).
ByteImage posterize(const ByteImage& image, int bits);
// ImageEnhance.Color / Contrast / Brightness / Sharpness(image).enhance(factor).
ByteImage color(const ByteImage& image, double factor);
ByteImage contrast(const ByteImage& image, double factor);
ByteImage brightness(const ByteImage& image, double factor);
ByteImage sharpness(const ByteImage& image, double factor);
// Image.transform(size, AFFINE, matrix, resample, fillcolor=fill): output pixel (x, y) samples the
// source at (a x' + b y' + c, d x' + e y' + f) with x' = x + 0.5, y' = y + 0.5.
ByteImage affine(const ByteImage& image, const std::array<double, 6>& matrix, Resample resample, const FillColor& fill);
// Image.rotate(degrees, resample, fillcolor=fill): counter-clockwise about the centre, same size.
ByteImage rotate(const ByteImage& image, double degrees, Resample resample, const FillColor& fill);

}  // namespace pil
}  // namespace colo::data
