#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace colo::data {

// Reading and writing JPEG (libjpeg-turbo) and PNG (libpng) files as 8-bit RGB. The format is
// recognised by the file's first bytes, not its name (ImageNet has a PNG named .JPEG). Every
// error is a DatasetError that names the file and what is wrong with it.

enum class ImageFormat { kJpeg, kPng };

// The most pixels (height x width) an image may declare: PIL's limit (2 x Image.MAX_IMAGE_PIXELS,
// where it raises DecompressionBombError), so that colo reads what torchvision reads. A header that
// claims more (a corrupt or hostile file: 100000 x 100000 would take 30 GB to decode) is a
// DatasetError naming the file, found before anything is allocated.
constexpr int64_t kMaxImagePixels = 178956970;

struct ImageInfo {
  ImageFormat format = ImageFormat::kJpeg;
  int64_t height = 0;
  int64_t width = 0;
};

// The part of an image to decode, in the full image's pixels; an empty region means all of it.
struct DecodeRegion {
  int64_t top = 0;
  int64_t left = 0;
  int64_t height = 0;
  int64_t width = 0;
  // The smallest acceptable scale: a JPEG may be decoded at 1/2, 1/4 or 1/8 of its size (its DCT
  // does the shrinking nearly for free) as long as the scale stays >= this. 1 decodes at full size.
  double min_scale = 1.0;
};

// Decoded pixels: height x width x 3 bytes, row-major RGB. They cover at least the region asked
// for: pixel (y, x) is the full image's area from (top + y / scale, left + x / scale) to the next
// pixel. (A JPEG's columns are decoded from a multiple of its block width, so `left` may lie a
// few pixels before the region's.)
struct DecodedImage {
  int64_t height = 0;
  int64_t width = 0;
  std::vector<uint8_t> pixels;
  int64_t top = 0;    // in full-image pixels
  int64_t left = 0;   // in full-image pixels
  double scale = 1.0;  // decoded pixels per full-image pixel
  ImageInfo full;     // the whole image
};

// The file's format and size from its header. `name` is only for messages. More than
// kMaxImagePixels is a DatasetError.
ImageInfo read_image_info(const uint8_t* data, size_t size, const std::string& name);

// Decodes (a region of) an image. Grayscale, palette, 16-bit and CMYK images come out as RGB; an
// alpha channel is dropped (as PIL's convert("RGB") does). A truncated or corrupt file, one that
// declares more than kMaxImagePixels, or one there is not the memory to decode throws DatasetError.
DecodedImage decode_image(const uint8_t* data, size_t size, const std::string& name,
                          const DecodeRegion& region = {});

// A whole file's bytes; throws DatasetError naming the file when it cannot be read.
std::vector<uint8_t> read_binary_file(const std::string& path);

// Writes 8-bit RGB pixels (height x width x 3, row-major) as a baseline JPEG of the given quality
// (1-100, 4:2:0 chroma) or as a PNG; atomically neither, the file is written in place. Throws
// DatasetError naming the file.
void write_jpeg(const std::string& path, const uint8_t* rgb, int64_t height, int64_t width, int quality = 90);
void write_png(const std::string& path, const uint8_t* rgb, int64_t height, int64_t width);

const char* to_string(ImageFormat format);

}  // namespace colo::data
