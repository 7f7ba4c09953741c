// The format-specific halves of image_codec.h: libjpeg-turbo in jpeg_codec.cpp, libpng in
// png_codec.cpp. Both throw DatasetError naming the file.
#pragma once

#include <colo/data/image_codec.h>

namespace colo::data::detail {

ImageInfo jpeg_info(const uint8_t* data, size_t size, const std::string& name);
DecodedImage decode_jpeg(const uint8_t* data, size_t size, const std::string& name, const DecodeRegion& region);

ImageInfo png_info(const uint8_t* data, size_t size, const std::string& name);
DecodedImage decode_png(const uint8_t* data, size_t size, const std::string& name, const DecodeRegion& region);

// Throws DatasetError naming the file when its header declares more than kMaxImagePixels.
void check_declared_size(ImageFormat format, int64_t height, int64_t width, const std::string& name);

// The region clamped to a height x width image (an empty one: all of it).
DecodeRegion clamp_region(const DecodeRegion& region, int64_t height, int64_t width);

}  // namespace colo::data::detail
