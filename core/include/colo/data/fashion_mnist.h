#pragma once

#include <colo/data/in_memory_dataset.h>

#include <string>

namespace colo::data {

// Fashion-MNIST (Zalando): 28×28 grayscale images of 10 kinds of clothing, 60000 for training
// and 10000 for testing, as the four IDX files {train,t10k}-{images-idx3,labels-idx1}-ubyte,
// each either plain or gzip-compressed with a ".gz" suffix (the plain name is tried first).
//
// Default augmentation: crop padding 2 and horizontal flips. Flips preserve every label: the
// garments are left-right symmetric, and the footwear classes (sandal, sneaker, ankle boot),
// which all point left in the data set, are still the same class when mirrored.
// Normalisation: mean 0.2860, std 0.3530 (the training split's pixel statistics).
class FashionMnist : public InMemoryDataset {
 public:
  // Throws DatasetError when a file is missing (naming the directory searched and how to
  // install or point to the data) or malformed, or when image and label counts differ.
  explicit FashionMnist(Split split, const std::string& directory = default_directory());

  // $COLO_DATA_DIR/fashion-mnist when COLO_DATA_DIR is set, else /usr/share/datasets/fashion-mnist,
  // where Debian's dataset-fashion-mnist package installs the gzip-compressed files.
  static std::string default_directory();

  static constexpr int64_t kNumClasses = 10;
};

}  // namespace colo::data
