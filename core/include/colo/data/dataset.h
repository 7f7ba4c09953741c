#pragma once

#include <colo/data/batch.h>
#include <colo/data/random_erasing.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace colo::data {

enum class Split { kTrain, kTest };

struct ImageShape {
  int64_t channels = 0;
  int64_t height = 0;
  int64_t width = 0;

  bool operator==(const ImageShape& other) const {
    return channels == other.channels && height == other.height && width == other.width;
  }
  bool operator!=(const ImageShape& other) const { return !(*this == other); }
};

// Per-channel statistics that map pixel values in [0, 1] to roughly zero mean and unit variance:
// x' = (x - mean[c]) / std[c].
struct Normalization {
  std::vector<double> mean;
  std::vector<double> std;
};

// The augmentations small-image training uses (torchvision's RandomCrop(size, padding) and
// RandomHorizontalFlip): pad every side with crop_padding black pixels, crop back to the
// original size at a random offset, and mirror left-right with probability 1/2. Then, as timm's
// create_transform orders them: one of timm's policies (auto_augment.h) on the image as 8-bit
// pixels, filled with the normalisation mean, and after normalising, timm's random erasing.
struct Augmentation {
  // Crop and flip as before the policies existed (Augmentation{4, true}); the rest by name.
  /* implicit */ Augmentation(int64_t padding = 0, bool flip = false) : crop_padding(padding), horizontal_flip(flip) {}

  int64_t crop_padding = 0;
  bool horizontal_flip = false;
  std::string rand_augment;  // timm's RandAugment string, e.g. "rand-m9-mstd0.5-inc1"; empty: off
  std::string auto_augment;  // timm's AutoAugment policy: "original" (optionally "-mstd<x>"); empty: off
  RandomErasingOptions random_erasing;  // off unless its probability is positive

  bool enabled() const {
    return crop_padding > 0 || horizontal_flip || !rand_augment.empty() || !auto_augment.empty() ||
           random_erasing.enabled();
  }
};

// An image classification data set with random access. Implementations are immutable after
// construction, so get_batch may be called from the loader's prefetch thread while the caller
// uses the same object.
class Dataset {
 public:
  virtual ~Dataset() = default;

  virtual std::string name() const = 0;
  virtual int64_t size() const = 0;
  virtual int64_t num_classes() const = 0;
  virtual ImageShape image_shape() const = 0;

  // Images float [B, C, H, W] with values in [0, 1] (not normalised: the DataLoader normalises
  // after augmenting, so that crop padding is black as in torchvision) and labels int64 [B] on
  // the CPU, in the order of indices. Throws std::out_of_range for an index outside [0, size()).
  virtual Batch get_batch(const std::vector<int64_t>& indices) const = 0;

  // A training batch, when the DataLoader augments: one seed per index, of which the image's
  // random choices are a function. Data sets that augment while reading override it (ImageFolder
  // takes its random crop from each image at the image's own size, before resizing it); the
  // default reads the images as get_batch does, and the loader augments the tensors itself.
  virtual Batch get_augmented_batch(const std::vector<int64_t>& indices,
                                    const std::vector<uint64_t>& sample_seeds) const {
    (void)sample_seeds;
    return get_batch(indices);
  }

  // A batch made directly on `device` (a CUDA device), on its current stream: images there, labels
  // on the CPU or there. Data sets that decode on the GPU override it (ImageFolder with the nvJPEG
  // decoder); nullopt, the default, means this data set reads on the CPU (get_batch or
  // get_augmented_batch, as sample_seeds is null or not) and the loader copies the batch over.
  // Same images, labels and random draws either way, so the loader's state resumes alike.
  virtual std::optional<Batch> get_device_batch(const std::vector<int64_t>& indices,
                                                const std::vector<uint64_t>* sample_seeds,
                                                const torch::Device& device) const {
    (void)indices, (void)sample_seeds, (void)device;
    return std::nullopt;
  }
  // Empty, or why this data set cannot feed a loader that delivers to `device` (an ImageFolder told
  // to decode with nvJPEG, on a CPU device or a build without nvJPEG): the DataLoader lists it with
  // its own option errors.
  virtual std::string device_problem(const torch::Device& device) const {
    (void)device;
    return {};
  }

  // The statistics the DataLoader normalises with unless told otherwise (those of the training
  // split, as customary, so that train and test images are mapped alike).
  virtual Normalization default_normalization() const = 0;
  // The augmentation the DataLoader applies when augmentation is on and none is given.
  virtual Augmentation default_augmentation() const { return {}; }
};

// Where data sets live unless a directory is given: $COLO_DATA_DIR when set, else
// /usr/share/datasets (where Debian's dataset-* packages install).
std::string default_data_root();

const char* to_string(Split split);

}  // namespace colo::data
