#include <colo/data/cifar10.h>
#include <colo/data/dataset_error.h>
#include <colo/files/files.h>
#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "dataset_files.h"

namespace colo::data {
namespace {

std::string find_cifar10_file(const std::string& directory, const std::string& name, Split split) {
  if (auto path = detail::find_plain_or_gzipped(files::join(directory, name))) return *path;
  throw DatasetError(fmt::format(
      "CIFAR-10 ({} split): cannot find {} or {}.gz in {}. Download the binary version of CIFAR-10 "
      "(cifar-10-binary.tar.gz), extract it, and either set COLO_DATA_DIR to the directory that holds "
      "cifar-10-batches-bin or pass its path to --data-dir.",
      to_string(split), name, name, detail::describe_searched_directory(directory, Cifar10::default_directory())));
}

InMemoryDataset load_cifar10(Split split, const std::string& directory) {
  std::vector<std::string> names;
  if (split == Split::kTrain) {
    for (int i = 1; i <= 5; ++i) names.push_back(fmt::format("data_batch_{}.bin", i));
  } else {
    names.push_back("test_batch.bin");
  }
  std::vector<std::string> paths;
  for (const auto& name : names) paths.push_back(find_cifar10_file(directory, name, split));

  constexpr int64_t kPixels = Cifar10::kRecordBytes - 1;
  std::vector<torch::Tensor> images;
  std::vector<torch::Tensor> labels;
  for (const auto& path : paths) {
    const std::vector<uint8_t> bytes = detail::read_file_bytes(path);
    const auto size = static_cast<int64_t>(bytes.size());
    if (size == 0 || size % Cifar10::kRecordBytes != 0) {
      throw DatasetError(fmt::format(
          "{}: {} bytes is not a whole number of {}-byte CIFAR-10 records (1 label byte + 3072 pixel bytes){}; "
          "fetch or re-extract the file",
          path, size, Cifar10::kRecordBytes,
          size > Cifar10::kRecordBytes ? fmt::format(": truncated after {} records", size / Cifar10::kRecordBytes)
                                       : ""));
    }
    const int64_t count = size / Cifar10::kRecordBytes;
    // One copy into a tensor, then strided views: column 0 holds the labels, the rest the
    // pixels in the channel-major order colo's [C, H, W] images use.
    auto records = torch::empty({count, Cifar10::kRecordBytes}, torch::kUInt8);
    std::memcpy(records.data_ptr<uint8_t>(), bytes.data(), bytes.size());
    auto file_labels = records.select(1, 0).to(torch::kLong);
    const auto bad = (file_labels >= Cifar10::kNumClasses).nonzero();
    if (bad.size(0) > 0) {
      const int64_t record = bad[0].item<int64_t>();
      throw DatasetError(
          fmt::format("{}: record {} has label {}, not a CIFAR-10 class (0..9); is this the "
                      "binary version of CIFAR-10 (not CIFAR-100 or the Python pickles)?",
                      path, record, file_labels[record].item<int64_t>()));
    }
    images.push_back(records.narrow(1, 1, kPixels).reshape({count, 3, 32, 32}));
    labels.push_back(file_labels);
  }
  return InMemoryDataset(torch::cat(images), torch::cat(labels), Cifar10::kNumClasses,
                         fmt::format("CIFAR-10 {}", to_string(split)),
                         Normalization{{0.4914, 0.4822, 0.4465}, {0.2470, 0.2435, 0.2616}}, Augmentation{4, true});
}

}  // namespace

Cifar10::Cifar10(Split split, const std::string& directory) : InMemoryDataset(load_cifar10(split, directory)) {}

std::string Cifar10::default_directory() { return files::join(default_data_root(), "cifar-10-batches-bin"); }

}  // namespace colo::data
