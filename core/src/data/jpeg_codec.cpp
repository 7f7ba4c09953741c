// JPEG through libjpeg's API as libjpeg-turbo implements it: its SIMD decoder, DCT scaling
// (decode at 1/2, 1/4, 1/8 of the size) and partial decoding (jpeg_crop_scanline for columns,
// jpeg_skip_scanlines for rows), which a random crop makes worth having: only the crop is
// converted to pixels.
//
// libjpeg reports errors by calling error_exit, which must not return: it longjmps back to the
// setjmp in run_decompress/run_compress. Those functions hold no C++ object whose destructor a
// longjmp would skip; everything they change lives behind pointers, so its state after the jump
// is well defined.
#include <colo/data/dataset_error.h>
#include <fmt/format.h>

// jpeglib.h needs size_t and FILE declared first.
#include <csetjmp>
#include <cstdio>
#include <jerror.h>
#include <jpeglib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>

#include "image_codecs.h"

namespace colo::data::detail {
namespace {

struct ErrorManager {
  jpeg_error_mgr manager;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

extern "C" void on_error(j_common_ptr info) {
  auto* errors = reinterpret_cast<ErrorManager*>(info->err);
  (*info->err->format_message)(info, errors->message);
  std::longjmp(errors->jump, 1);
}

// Warnings about corrupt data are not printed. A file that ends early is an error (libjpeg would
// fill the missing rows with grey): PIL refuses such files too.
extern "C" void on_message(j_common_ptr info, int level) {
  if (level == -1 && info->err->msg_code == JWRN_JPEG_EOF) on_error(info);
}

void install_errors(ErrorManager& errors) {
  jpeg_std_error(&errors.manager);
  errors.manager.error_exit = on_error;
  errors.manager.emit_message = on_message;
  errors.message[0] = '\0';
}

[[noreturn]] void fail(const std::string& name, const char* action, const char* message) {
  throw DatasetError(fmt::format("{}: cannot {} this JPEG file ({}); replace or remove the file", name, action,
                                 message));
}

struct DecompressJob {
  const uint8_t* data;
  size_t size;
  DecodeRegion region;  // clamped; empty for the header only
  bool header_only;
  DecodedImage* out;
  std::vector<uint8_t>* cmyk_row;  // one row of CMYK samples, for conversion by hand
};

// Returns false after a libjpeg error (its text in errors.message).
bool run_decompress(DecompressJob* job, ErrorManager* errors) {
  jpeg_decompress_struct info;
  info.err = &errors->manager;
  if (setjmp(errors->jump)) {
    jpeg_destroy_decompress(&info);
    return false;
  }
  jpeg_create_decompress(&info);
  jpeg_mem_src(&info, job->data, static_cast<unsigned long>(job->size));
  jpeg_read_header(&info, TRUE);
  DecodedImage* out = job->out;
  out->full.format = ImageFormat::kJpeg;
  out->full.height = info.image_height;
  out->full.width = info.image_width;
  if (job->header_only) {
    jpeg_destroy_decompress(&info);
    return true;
  }
  // CMYK (Adobe's, stored inverted) is converted by hand below; everything else libjpeg converts.
  const bool cmyk = info.jpeg_color_space == JCS_CMYK || info.jpeg_color_space == JCS_YCCK;
  info.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  const DecodeRegion& region = job->region;
  // The smallest power-of-two reduction that keeps the scale >= min_scale.
  unsigned denominator = 1;
  while (denominator < 8 && 1.0 / (2.0 * denominator) >= region.min_scale) denominator *= 2;
  info.scale_num = 1;
  info.scale_denom = denominator;
  jpeg_start_decompress(&info);
  // Decoded pixel j stands for full-image pixels [j * denominator, (j + 1) * denominator).
  const double scale = 1.0 / static_cast<double>(denominator);
  // The region in output (scaled) pixels, widened to whole pixels.
  auto scaled = [&](int64_t v) { return static_cast<double>(v) * scale; };
  const auto out_height = static_cast<int64_t>(info.output_height);
  const auto out_width = static_cast<int64_t>(info.output_width);
  const int64_t top = std::clamp<int64_t>(static_cast<int64_t>(std::floor(scaled(region.top))), 0, out_height - 1);
  const int64_t bottom =
      std::clamp<int64_t>(static_cast<int64_t>(std::ceil(scaled(region.top + region.height))), top + 1, out_height);
  int64_t left = std::clamp<int64_t>(static_cast<int64_t>(std::floor(scaled(region.left))), 0, out_width - 1);
  const int64_t right =
      std::clamp<int64_t>(static_cast<int64_t>(std::ceil(scaled(region.left + region.width))), left + 1, out_width);
  JDIMENSION x_offset = static_cast<JDIMENSION>(left);
  JDIMENSION crop_width = static_cast<JDIMENSION>(right - left);
  if (crop_width < info.output_width) jpeg_crop_scanline(&info, &x_offset, &crop_width);  // aligns x_offset down
  left = x_offset;
  const int64_t width = crop_width;
  const int64_t height = bottom - top;
  const int components = info.output_components;
  if (top > 0) jpeg_skip_scanlines(&info, static_cast<JDIMENSION>(top));
  std::vector<uint8_t>& pixels = out->pixels;
  std::vector<uint8_t>* cmyk_rows = job->cmyk_row;
  try {
    pixels.resize(static_cast<size_t>(height * width * 3));
    if (cmyk) cmyk_rows->resize(static_cast<size_t>(width * components));
  } catch (const std::bad_alloc&) {
    jpeg_destroy_decompress(&info);  // decode_image reports it, naming the file
    throw;
  }
  for (int64_t y = 0; y < height; ++y) {
    uint8_t* row = pixels.data() + y * width * 3;
    JSAMPROW target = cmyk ? cmyk_rows->data() : row;
    jpeg_read_scanlines(&info, &target, 1);
    if (cmyk) {
      const uint8_t* c = cmyk_rows->data();
      for (int64_t x = 0; x < width; ++x, c += 4) {
        // Adobe CMYK is inverted: 255 means no ink.
        row[3 * x + 0] = static_cast<uint8_t>(c[0] * c[3] / 255);
        row[3 * x + 1] = static_cast<uint8_t>(c[1] * c[3] / 255);
        row[3 * x + 2] = static_cast<uint8_t>(c[2] * c[3] / 255);
      }
    }
  }
  out->height = height;
  out->width = width;
  out->top = top * denominator;
  out->left = left * denominator;
  out->scale = scale;
  // Rows below the region are never decoded.
  jpeg_abort_decompress(&info);
  jpeg_destroy_decompress(&info);
  return true;
}

struct CompressJob {
  std::FILE* file;
  const uint8_t* rgb;
  int64_t height;
  int64_t width;
  int quality;
};

bool run_compress(CompressJob* job, ErrorManager* errors) {
  jpeg_compress_struct info;
  info.err = &errors->manager;
  if (setjmp(errors->jump)) {
    jpeg_destroy_compress(&info);
    return false;
  }
  jpeg_create_compress(&info);
  jpeg_stdio_dest(&info, job->file);
  info.image_width = static_cast<JDIMENSION>(job->width);
  info.image_height = static_cast<JDIMENSION>(job->height);
  info.input_components = 3;
  info.in_color_space = JCS_RGB;
  jpeg_set_defaults(&info);
  jpeg_set_quality(&info, job->quality, TRUE);
  jpeg_start_compress(&info, TRUE);
  for (int64_t y = 0; y < job->height; ++y) {
    auto row = const_cast<JSAMPROW>(job->rgb + y * job->width * 3);
    jpeg_write_scanlines(&info, &row, 1);
  }
  jpeg_finish_compress(&info);
  jpeg_destroy_compress(&info);
  return true;
}

}  // namespace

ImageInfo jpeg_info(const uint8_t* data, size_t size, const std::string& name) {
  ErrorManager errors;
  install_errors(errors);
  DecodedImage out;
  DecompressJob job{data, size, {}, true, &out, nullptr};
  if (!run_decompress(&job, &errors)) fail(name, "read the header of", errors.message);
  check_declared_size(ImageFormat::kJpeg, out.full.height, out.full.width, name);
  return out.full;
}

DecodedImage decode_jpeg(const uint8_t* data, size_t size, const std::string& name, const DecodeRegion& region) {
  const ImageInfo info = jpeg_info(data, size, name);
  ErrorManager errors;
  install_errors(errors);
  DecodedImage out;
  std::vector<uint8_t> cmyk_row;
  DecompressJob job{data, size, clamp_region(region, info.height, info.width), false, &out, &cmyk_row};
  if (!run_decompress(&job, &errors)) fail(name, "decode", errors.message);
  return out;
}

}  // namespace colo::data::detail

namespace colo::data {

void write_jpeg(const std::string& path, const uint8_t* rgb, int64_t height, int64_t width, int quality) {
  if (height < 1 || width < 1 || quality < 1 || quality > 100) {
    throw DatasetError(fmt::format("{}: cannot write a {}x{} JPEG of quality {} (sizes must be positive, quality "
                                   "1-100)",
                                   path, height, width, quality));
  }
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) throw DatasetError(fmt::format("{}: cannot create the file ({})", path, std::strerror(errno)));
  detail::ErrorManager errors;
  detail::install_errors(errors);
  detail::CompressJob job{file, rgb, height, width, quality};
  const bool written = detail::run_compress(&job, &errors);
  const bool closed = std::fclose(file) == 0;
  if (!written) throw DatasetError(fmt::format("{}: cannot write the JPEG ({})", path, errors.message));
  if (!closed) throw DatasetError(fmt::format("{}: writing the JPEG failed ({})", path, std::strerror(errno)));
}

}  // namespace colo::data
