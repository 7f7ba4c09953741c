#pragma once

#include <cstdint>
#include <string>

namespace colo::bench {

struct FolderSpec {
  int64_t classes = 10;
  int64_t images_per_class = 100;
  int64_t height = 375;  // ImageNet's most common size is 500x375
  int64_t width = 500;
  int quality = 90;
  int threads = 1;
};

// Writes root/<class>/<n>.JPEG (class names c000, c001, ...) of photo-like content: a few smooth
// waves and a textured noise, so that a JPEG of ImageNet's size is about as large as ImageNet's
// (~110 KB at 500x375, quality 90) and decodes about as fast. Returns the bytes written.
int64_t make_image_folder(const std::string& root, const FolderSpec& spec);

}  // namespace colo::bench
