#pragma once

#include <cstdint>

namespace colo::data {

// A rectangle of an image in pixels; fractions are allowed (a box mapped onto an image decoded at
// a reduced scale).
struct CropBox {
  double top = 0;
  double left = 0;
  double height = 0;
  double width = 0;
};

// The area a resampling filter may read: rows [top, bottom) and columns [left, right).
struct PixelBounds {
  int64_t top = 0;
  int64_t left = 0;
  int64_t bottom = 0;
  int64_t right = 0;
};

// Resamples `box` of an 8-bit RGB image (height x width x 3, row-major) to out_height x out_width
// floats in [0, 1], channel-planar (3 x out_height x out_width) at `out`, mirrored left-right
// when `flip`. The filter is the antialiased bilinear one of PIL's and torchvision's resize (a
// triangle widened by the shrink factor, taps renormalised at the edges), so that resampling a
// box equals cropping it and resizing the crop with
// torch::nn::functional::interpolate(bilinear, antialias, align_corners=false) when `bounds` is
// the box, and resizing the whole image and cropping the result when `bounds` is the image.
// Written for speed in the data loader's worker threads: plain loops, no LibTorch calls.
void resample_rgb(const uint8_t* pixels, int64_t height, int64_t width, const CropBox& box,
                  const PixelBounds& bounds, int64_t out_height, int64_t out_width, bool flip, float* out);

// torchvision's RandomResizedCrop.get_params: a box of a random area fraction in [min_scale,
// max_scale] of the image and a random aspect ratio (log-uniform in [min_ratio, max_ratio]) at a
// random place; after ten misses, the centred box of the largest allowed aspect. Every draw is a
// function of `seed`, so the same seed gives the same box.
struct RandomResizedCropParams {
  double min_scale = 0.08;
  double max_scale = 1.0;
  double min_ratio = 3.0 / 4.0;
  double max_ratio = 4.0 / 3.0;
};
CropBox random_resized_crop_box(int64_t height, int64_t width, const RandomResizedCropParams& params, uint64_t seed);

// torchvision's Resize(resize_size) (the shorter side to resize_size, the longer in proportion,
// rounded down) then CenterCrop(crop_size), as one box of the original image.
CropBox resize_center_crop_box(int64_t height, int64_t width, int64_t resize_size, int64_t crop_size);

}  // namespace colo::data
