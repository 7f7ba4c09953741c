#pragma once

#include <colo/data/in_memory_dataset.h>

#include <string>

namespace colo::data {

// CIFAR-10, binary version: 32×32 RGB images of 10 classes in data_batch_1.bin … data_batch_5.bin
// (training, 10000 images each) and test_batch.bin (testing). Each record is one label byte then
// 3072 pixel bytes (the red, green and blue planes, each 32 rows of 32). Files may be
// gzip-compressed with a ".gz" suffix (the plain name is tried first).
//
// Default augmentation: crop padding 4 and horizontal flips (the standard CIFAR recipe).
// Normalisation: mean (0.4914, 0.4822, 0.4465), std (0.2470, 0.2435, 0.2616).
class Cifar10 : public InMemoryDataset {
 public:
  // Throws DatasetError when a file is missing (naming the directory searched and how to point
  // to the data), its size is not a whole number of records, or a label is not in 0..9.
  explicit Cifar10(Split split, const std::string& directory = default_directory());

  // $COLO_DATA_DIR/cifar-10-batches-bin when COLO_DATA_DIR is set, else
  // /usr/share/datasets/cifar-10-batches-bin ("cifar-10-batches-bin" is the directory the
  // official cifar-10-binary.tar.gz extracts to).
  static std::string default_directory();

  static constexpr int64_t kNumClasses = 10;
  static constexpr int64_t kRecordBytes = 1 + 3 * 32 * 32;
};

}  // namespace colo::data
