#include <colo/data/dataset_error.h>
#include <colo/data/fashion_mnist.h>
#include <colo/data/idx_file.h>
#include <colo/files/files.h>
#include <fmt/format.h>

#include "dataset_files.h"

namespace colo::data {
namespace {

std::string find_fashion_mnist_file(const std::string& directory, const std::string& name, Split split) {
  if (auto path = detail::find_plain_or_gzipped(files::join(directory, name))) return *path;
  throw DatasetError(fmt::format(
      "Fashion-MNIST ({} split): cannot find {} or {}.gz in {}. Install Debian's dataset-fashion-mnist "
      "package (apt-get install dataset-fashion-mnist, which puts the files in /usr/share/datasets/fashion-mnist), "
      "or point colo at a directory holding the four IDX files: set COLO_DATA_DIR (colo then looks in "
      "$COLO_DATA_DIR/fashion-mnist) or pass --data-dir to the example programs.",
      to_string(split), name, name, detail::describe_searched_directory(directory, FashionMnist::default_directory())));
}

InMemoryDataset load_fashion_mnist(Split split, const std::string& directory) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  const auto images_path = find_fashion_mnist_file(directory, prefix + "-images-idx3-ubyte", split);
  const auto labels_path = find_fashion_mnist_file(directory, prefix + "-labels-idx1-ubyte", split);
  torch::Tensor images = read_idx_file(images_path, 3);
  torch::Tensor labels = read_idx_file(labels_path, 1);
  if (images.size(0) != labels.size(0)) {
    throw DatasetError(fmt::format(
        "Fashion-MNIST ({} split): {} holds {} images but {} holds {} labels; the files must come from the same "
        "split and release, fetch or reinstall them",
        to_string(split), images_path, images.size(0), labels_path, labels.size(0)));
  }
  if (images.size(0) == 0) {
    throw DatasetError(
        fmt::format("Fashion-MNIST ({} split): {} holds no images", to_string(split), images_path));
  }
  const auto bad = (labels >= FashionMnist::kNumClasses).nonzero();
  if (bad.size(0) > 0) {
    const int64_t index = bad[0].item<int64_t>();
    throw DatasetError(
        fmt::format("{}: label {} of image {} is not a Fashion-MNIST class (0..9); is this the "
                    "right file?",
                    labels_path, labels[index].item<int64_t>(), index));
  }
  return InMemoryDataset(images.unsqueeze(1), labels, FashionMnist::kNumClasses,
                         fmt::format("Fashion-MNIST {}", to_string(split)), Normalization{{0.2860}, {0.3530}},
                         Augmentation{2, true});
}

}  // namespace

FashionMnist::FashionMnist(Split split, const std::string& directory)
    : InMemoryDataset(load_fashion_mnist(split, directory)) {}

std::string FashionMnist::default_directory() { return files::join(default_data_root(), "fashion-mnist"); }

}  // namespace colo::data
