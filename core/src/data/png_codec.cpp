// PNG through libpng's simplified API (png_image), which converts every PNG flavour (grey,
// palette, 16-bit, with or without alpha) to 8-bit RGB(A) and reports errors in its own buffer,
// without longjmp reaching our code.
#include <colo/data/dataset_error.h>
#include <fmt/format.h>
#include <png.h>

#include <cstring>
#include <new>

#include "image_codecs.h"

namespace colo::data::detail {
namespace {

[[noreturn]] void fail(const std::string& name, const char* action, const png_image& image) {
  throw DatasetError(fmt::format("{}: cannot {} this PNG file ({}); replace or remove the file", name, action,
                                 image.message));
}

}  // namespace

ImageInfo png_info(const uint8_t* data, size_t size, const std::string& name) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, data, size)) fail(name, "read the header of", image);
  png_image_free(&image);
  check_declared_size(ImageFormat::kPng, image.height, image.width, name);
  return {ImageFormat::kPng, static_cast<int64_t>(image.height), static_cast<int64_t>(image.width)};
}

DecodedImage decode_png(const uint8_t* data, size_t size, const std::string& name, const DecodeRegion& request) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, data, size)) fail(name, "read the header of", image);
  try {
    check_declared_size(ImageFormat::kPng, image.height, image.width, name);
  } catch (...) {
    png_image_free(&image);
    throw;
  }
  // With alpha, read RGBA and drop A (PIL's convert("RGB")) rather than let libpng blend.
  const bool alpha = (image.format & PNG_FORMAT_FLAG_ALPHA) != 0;
  image.format = alpha ? PNG_FORMAT_RGBA : PNG_FORMAT_RGB;
  const int64_t height = image.height;
  const int64_t width = image.width;
  const int64_t channels = alpha ? 4 : 3;
  std::vector<uint8_t> all;
  try {
    all.resize(static_cast<size_t>(height * width * channels));
  } catch (const std::bad_alloc&) {
    png_image_free(&image);  // decode_image reports it, naming the file
    throw;
  }
  if (!png_image_finish_read(&image, nullptr, all.data(), 0, nullptr)) fail(name, "decode", image);

  // PNG has no partial decoding: cut the region out of the whole image.
  const DecodeRegion region = clamp_region(request, height, width);
  DecodedImage out;
  out.full = {ImageFormat::kPng, height, width};
  out.top = region.top;
  out.left = region.left;
  out.height = region.height;
  out.width = region.width;
  out.pixels.resize(static_cast<size_t>(out.height * out.width * 3));
  for (int64_t y = 0; y < out.height; ++y) {
    const uint8_t* source = all.data() + ((region.top + y) * width + region.left) * channels;
    uint8_t* target = out.pixels.data() + y * out.width * 3;
    if (!alpha) {
      std::memcpy(target, source, static_cast<size_t>(out.width * 3));
      continue;
    }
    for (int64_t x = 0; x < out.width; ++x) std::memcpy(target + 3 * x, source + 4 * x, 3);
  }
  return out;
}

}  // namespace colo::data::detail

namespace colo::data {

void write_png(const std::string& path, const uint8_t* rgb, int64_t height, int64_t width) {
  if (height < 1 || width < 1) {
    throw DatasetError(fmt::format("{}: cannot write a {}x{} PNG (sizes must be positive)", path, height, width));
  }
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = PNG_FORMAT_RGB;
  if (!png_image_write_to_file(&image, path.c_str(), 0, rgb, 0, nullptr)) {
    throw DatasetError(fmt::format("{}: cannot write the PNG ({})", path, image.message));
  }
}

}  // namespace colo::data
