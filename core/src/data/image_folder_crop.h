// What ImageFolder cuts out of an image and whether it mirrors it: shared by the CPU decoder
// (image_folder.cpp) and the GPU one (image_folder_gpu.cpp), so that both draw the same boxes and
// flips from a sample's seed.
#pragma once

#include <colo/data/image_folder.h>
#include <colo/data/image_resample.h>

#include <cstdint>

namespace colo::data::detail {

struct CropPlan {
  CropBox box;  // in the full image's pixels
  bool flip = false;
};

// Training (augment): RandomResizedCrop's box and the flip, drawn from `seed`; evaluation: the box
// of resize-then-centre-crop.
CropPlan plan_crop(const ImageFolderOptions& options, int64_t height, int64_t width, bool augment, uint64_t seed);

// The pixels the resampling filter may read, in a decoded image whose pixel (0, 0) is the box's
// frame's (0, 0): the box's own pixels for a training crop (cut out, then resized), all of the
// image for evaluation (resized, then cut).
PixelBounds filter_bounds(const CropBox& box, int64_t height, int64_t width, bool augment);

}  // namespace colo::data::detail
