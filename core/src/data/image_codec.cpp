#include <colo/data/dataset_error.h>
#include <colo/data/image_codec.h>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>

#include "image_codecs.h"

namespace colo::data {
namespace {

constexpr uint8_t kJpegMagic[] = {0xff, 0xd8, 0xff};
constexpr uint8_t kPngMagic[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

ImageFormat detect(const uint8_t* data, size_t size, const std::string& name) {
  if (size >= sizeof kJpegMagic && std::memcmp(data, kJpegMagic, sizeof kJpegMagic) == 0) return ImageFormat::kJpeg;
  if (size >= sizeof kPngMagic && std::memcmp(data, kPngMagic, sizeof kPngMagic) == 0) return ImageFormat::kPng;
  throw DatasetError(fmt::format("{}: not a JPEG or PNG file ({}); replace or remove the file", name,
                                 size == 0 ? "it is empty" : fmt::format("{} bytes, none of the two formats' first bytes", size)));
}

}  // namespace

namespace detail {

void check_declared_size(ImageFormat format, int64_t height, int64_t width, const std::string& name) {
  if (height > 0 && width > 0 && height <= kMaxImagePixels / width) return;
  throw DatasetError(fmt::format(
      "{}: its {} header declares {}x{} pixels, more than the {} colo decodes (data::kMaxImagePixels, PIL's "
      "limit); replace or remove the file",
      name, to_string(format), width, height, kMaxImagePixels));
}

DecodeRegion clamp_region(const DecodeRegion& region, int64_t height, int64_t width) {
  DecodeRegion out = region;
  if (region.height <= 0 || region.width <= 0) {
    out.top = out.left = 0;
    out.height = height;
    out.width = width;
    return out;
  }
  out.top = std::clamp<int64_t>(region.top, 0, height - 1);
  out.left = std::clamp<int64_t>(region.left, 0, width - 1);
  out.height = std::clamp<int64_t>(region.top + region.height, out.top + 1, height) - out.top;
  out.width = std::clamp<int64_t>(region.left + region.width, out.left + 1, width) - out.left;
  return out;
}

}  // namespace detail

ImageInfo read_image_info(const uint8_t* data, size_t size, const std::string& name) {
  return detect(data, size, name) == ImageFormat::kJpeg ? detail::jpeg_info(data, size, name)
                                                        : detail::png_info(data, size, name);
}

DecodedImage decode_image(const uint8_t* data, size_t size, const std::string& name, const DecodeRegion& region) {
  const ImageFormat format = detect(data, size, name);
  try {
    return format == ImageFormat::kJpeg ? detail::decode_jpeg(data, size, name, region)
                                        : detail::decode_png(data, size, name, region);
  } catch (const std::bad_alloc&) {
    throw DatasetError(fmt::format("{}: not enough memory to decode this {} image; replace or remove the file",
                                   name, to_string(format)));
  }
}

std::vector<uint8_t> read_binary_file(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) throw DatasetError(fmt::format("{}: cannot open the file ({})", path, std::strerror(errno)));
  // One read of the size the file has: images are read whole, millions of times per run.
  std::vector<uint8_t> bytes;
  if (std::fseek(file, 0, SEEK_END) == 0) {
    const long size = std::ftell(file);
    if (size > 0) bytes.resize(static_cast<size_t>(size));
    std::rewind(file);
  }
  size_t count = bytes.empty() ? 0 : std::fread(bytes.data(), 1, bytes.size(), file);
  bytes.resize(count);
  const bool failed = std::ferror(file) != 0;
  const int error = errno;
  std::fclose(file);
  if (failed) throw DatasetError(fmt::format("{}: reading the file failed ({})", path, std::strerror(error)));
  return bytes;
}

const char* to_string(ImageFormat format) { return format == ImageFormat::kJpeg ? "JPEG" : "PNG"; }

}  // namespace colo::data
