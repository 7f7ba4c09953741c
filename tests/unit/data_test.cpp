// colo::data: file formats (IDX, gzip, CIFAR-10 records) on small files written here, the real
// Fashion-MNIST, transforms, DistributedSampler (against PyTorch's), and DataLoader
// determinism: prefetch, resume, resharding.
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <colo/data/cifar10.h>
#include <colo/data/data_loader.h>
#include <colo/data/dataset_error.h>
#include <colo/data/distributed_sampler.h>
#include <colo/data/fashion_mnist.h>
#include <colo/data/idx_file.h>
#include <colo/data/image_transform.h>
#include <colo/data/in_memory_dataset.h>
#include <colo/data/synthetic_dataset.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "error_of.h"
#include "scoped_env.h"
#include "temporary_directory.h"

namespace colo::data {
namespace {

using Bytes = std::vector<uint8_t>;

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "expected \"" << (part) << "\" in: " << (text)

// ---------------------------------------------------------------------------------------------
// Test files

using TempDir = colo::testing::TemporaryDirectory;

void write_file(const std::string& path, const Bytes& bytes) {
  std::ofstream file(path, std::ios::binary);
  file.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(file.good()) << path;
}

void put_u32_be(Bytes& bytes, uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<uint8_t>(value >> shift));
}
void put_u32_le(Bytes& bytes, uint32_t value) {
  for (int shift = 0; shift <= 24; shift += 8) bytes.push_back(static_cast<uint8_t>(value >> shift));
}

// An IDX file of unsigned bytes, written from the format's description.
Bytes idx_bytes(const std::vector<uint32_t>& sizes, const Bytes& data) {
  Bytes bytes = {0, 0, 0x08, static_cast<uint8_t>(sizes.size())};
  for (const uint32_t size : sizes) put_u32_be(bytes, size);
  bytes.insert(bytes.end(), data.begin(), data.end());
  return bytes;
}

uint32_t crc32(const Bytes& data) {
  uint32_t crc = 0xffffffffu;
  for (const uint8_t byte : data) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

// A gzip member (RFC 1952) whose deflate stream (RFC 1951) uses stored blocks: written by hand
// here, so the reader is checked against the format rather than against zlib's own writer.
Bytes gzip_stored(const Bytes& data) {
  Bytes out = {0x1f, 0x8b, 0x08, 0x00, 0, 0, 0, 0, 0x00, 0xff};
  size_t offset = 0;
  do {
    const size_t length = std::min<size_t>(data.size() - offset, 65535);
    const bool last = offset + length == data.size();
    out.push_back(last ? 0x01 : 0x00);  // BFINAL, BTYPE = 00 (stored)
    out.push_back(static_cast<uint8_t>(length));
    out.push_back(static_cast<uint8_t>(length >> 8));
    out.push_back(static_cast<uint8_t>(~length));
    out.push_back(static_cast<uint8_t>(~length >> 8));
    out.insert(out.end(), data.begin() + static_cast<std::ptrdiff_t>(offset),
               data.begin() + static_cast<std::ptrdiff_t>(offset + length));
    offset += length;
  } while (offset < data.size());
  put_u32_le(out, crc32(data));
  put_u32_le(out, static_cast<uint32_t>(data.size()));
  return out;
}

Bytes iota_bytes(size_t count, uint8_t start = 0) {
  Bytes bytes(count);
  for (size_t i = 0; i < count; ++i) bytes[i] = static_cast<uint8_t>(start + i);
  return bytes;
}

torch::Tensor as_tensor(const Bytes& bytes, std::vector<int64_t> sizes) {
  return torch::tensor(std::vector<int64_t>(bytes.begin(), bytes.end()), torch::kLong).view(sizes).to(torch::kUInt8);
}

// The message of the DatasetError (std::invalid_argument) `body` throws.
template <typename Body>
std::string dataset_error(Body body) {
  return colo::testing::error_of<DatasetError>(body);
}
template <typename Body>
std::string invalid_argument(Body body) {
  return colo::testing::error_of<std::invalid_argument>(body);
}

using colo::testing::ScopedEnv;

// ---------------------------------------------------------------------------------------------
// IDX files and gzip

TEST(DataIdxTest, ReadsPlainFile) {
  TempDir dir;
  const Bytes data = iota_bytes(24, 100);
  write_file(dir / "images", idx_bytes({2, 3, 4}, data));
  const auto tensor = read_idx_file(dir / "images", 3);
  EXPECT_EQ(tensor.scalar_type(), torch::kUInt8);
  EXPECT_TRUE(torch::equal(tensor, as_tensor(data, {2, 3, 4})));

  write_file(dir / "labels", idx_bytes({5}, {1, 2, 3, 4, 5}));
  EXPECT_TRUE(torch::equal(read_idx_file(dir / "labels", 1), as_tensor({1, 2, 3, 4, 5}, {5})));
}

TEST(DataIdxTest, ReadsGzipFileOfSeveralBlocksAndMembersAndPlainData) {
  TempDir dir;
  // 70016 bytes: two stored blocks in the first member; a second member follows, as `cat a.gz b.gz` makes.
  const Bytes data = iota_bytes(2 * 7 * 5000, 3);
  const Bytes file = idx_bytes({2, 7, 5000}, data);
  const size_t half = 66000;
  Bytes gz = gzip_stored(Bytes(file.begin(), file.begin() + half));
  const Bytes second = gzip_stored(Bytes(file.begin() + half, file.end()));
  gz.insert(gz.end(), second.begin(), second.end());
  write_file(dir / "images.gz", gz);
  EXPECT_TRUE(torch::equal(read_idx_file(dir / "images.gz", 3), as_tensor(data, {2, 7, 5000})));
  // gzip is recognised by content, not by name.
  write_file(dir / "images", gz);
  EXPECT_TRUE(torch::equal(read_idx_file(dir / "images", 3), as_tensor(data, {2, 7, 5000})));
  // What follows the last member (zero padding, as tape blocks leave) is ignored, as gzip(1) does.
  gz.insert(gz.end(), 512, 0);
  write_file(dir / "padded.gz", gz);
  EXPECT_TRUE(torch::equal(read_idx_file(dir / "padded.gz", 3), as_tensor(data, {2, 7, 5000})));
  // And a file that is not gzip is read as it is, whatever its name says.
  write_file(dir / "plain.gz", file);
  EXPECT_TRUE(torch::equal(read_idx_file(dir / "plain.gz", 3), as_tensor(data, {2, 7, 5000})));
}

TEST(DataIdxTest, BadMagicNumber) {
  TempDir dir;
  write_file(dir / "labels", idx_bytes({3}, {1, 2, 3}));
  const auto message = dataset_error([&] { read_idx_file(dir / "labels", 3); });
  EXPECT_CONTAINS(message, (dir / "labels"));
  EXPECT_CONTAINS(message, ("bad magic number 0x00000801"));
  EXPECT_CONTAINS(message, ("expected 0x00000803"));

  Bytes not_bytes = idx_bytes({3}, {1, 2, 3});
  not_bytes[2] = 0x0d;  // IDX type code of float32
  write_file(dir / "floats", not_bytes);
  EXPECT_CONTAINS(dataset_error([&] { read_idx_file(dir / "floats", 1); }), ("bad magic number 0x00000d01"));
}

TEST(DataIdxTest, TruncatedFiles) {
  TempDir dir;
  Bytes file = idx_bytes({2, 3, 4}, iota_bytes(24));
  file.pop_back();
  write_file(dir / "short", file);
  auto message = dataset_error([&] { read_idx_file(dir / "short", 3); });
  EXPECT_CONTAINS(message, (dir / "short"));
  EXPECT_CONTAINS(message, ("truncated"));
  EXPECT_CONTAINS(message, ("2x3x4 = 24 data bytes, but 23 follow"));

  write_file(dir / "header", Bytes{0, 0, 8, 3, 0, 0, 0, 2, 0, 0});
  message = dataset_error([&] { read_idx_file(dir / "header", 3); });
  EXPECT_CONTAINS(message, ("truncated IDX header"));

  write_file(dir / "tiny", Bytes{0, 0});
  EXPECT_CONTAINS(dataset_error([&] { read_idx_file(dir / "tiny", 1); }), ("truncated"));

  file = idx_bytes({3}, {1, 2, 3, 4});
  write_file(dir / "long", file);
  EXPECT_CONTAINS(dataset_error([&] { read_idx_file(dir / "long", 1); }), ("longer than its header"));
}

TEST(DataIdxTest, CorruptAndTruncatedGzip) {
  TempDir dir;
  const Bytes good = gzip_stored(idx_bytes({4}, {1, 2, 3, 4}));

  Bytes bad_block = good;
  bad_block[10] = 0x07;  // BFINAL with BTYPE = 11, which RFC 1951 reserves
  write_file(dir / "block.gz", bad_block);
  auto message = dataset_error([&] { read_idx_file(dir / "block.gz", 1); });
  EXPECT_CONTAINS(message, (dir / "block.gz"));
  EXPECT_CONTAINS(message, ("corrupt gzip data"));

  Bytes bad_crc = good;
  bad_crc[16] ^= 0xff;  // a data byte: the CRC-32 in the trailer no longer matches
  write_file(dir / "crc.gz", bad_crc);
  EXPECT_CONTAINS(dataset_error([&] { read_idx_file(dir / "crc.gz", 1); }), ("corrupt gzip data"));

  const Bytes cut(good.begin(), good.end() - 10);
  write_file(dir / "cut.gz", cut);
  message = dataset_error([&] { read_idx_file(dir / "cut.gz", 1); });
  EXPECT_CONTAINS(message, (dir / "cut.gz"));
  EXPECT_CONTAINS(message, ("truncated gzip file"));
}

TEST(DataIdxTest, MissingFile) {
  TempDir dir;
  const auto message = dataset_error([&] { read_idx_file(dir / "absent", 1); });
  EXPECT_CONTAINS(message, (dir / "absent"));
  EXPECT_CONTAINS(message, ("cannot open"));
}

// ---------------------------------------------------------------------------------------------
// Fashion-MNIST

// Writes a Fashion-MNIST-style split of `count` images of 4×3 pixels (pixel j of image i is
// i * 12 + j) and the given labels; `gzip` compresses the files under a ".gz" name.
void write_mnist_split(const std::string& dir, const std::string& prefix, int count, const Bytes& labels, bool gzip) {
  const Bytes images = idx_bytes({static_cast<uint32_t>(count), 4, 3}, iota_bytes(static_cast<size_t>(count) * 12));
  const Bytes label_file = idx_bytes({static_cast<uint32_t>(labels.size())}, labels);
  write_file(files::join(dir, prefix + "-images-idx3-ubyte" + (gzip ? ".gz" : "")), gzip ? gzip_stored(images) : images);
  write_file(files::join(dir, prefix + "-labels-idx1-ubyte" + (gzip ? ".gz" : "")), gzip ? gzip_stored(label_file) : label_file);
}

TEST(DataFashionMnistTest, LoadsTinyPlainAndGzippedSplits) {
  TempDir dir;
  write_mnist_split(dir.path(), "train", 5, {9, 0, 3, 3, 1}, /*gzip=*/false);
  write_mnist_split(dir.path(), "t10k", 2, {4, 7}, /*gzip=*/true);

  const FashionMnist train(Split::kTrain, dir.path());
  EXPECT_EQ(train.size(), 5);
  EXPECT_EQ(train.num_classes(), 10);
  EXPECT_EQ(train.image_shape(), (ImageShape{1, 4, 3}));
  const Batch batch = train.get_batch({4, 0, 4});
  EXPECT_TRUE(torch::equal(batch.labels, torch::tensor({1, 9, 1}, torch::kLong)));
  ASSERT_EQ(batch.images.sizes(), (std::vector<int64_t>{3, 1, 4, 3}));
  EXPECT_EQ(batch.images.scalar_type(), torch::kFloat);
  const auto expected_first = (torch::arange(48, 60, torch::kFloat) / 255.0).view({1, 4, 3});
  EXPECT_TRUE(torch::allclose(batch.images[0], expected_first));
  EXPECT_TRUE(torch::equal(batch.images[0], batch.images[2]));
  EXPECT_FLOAT_EQ(batch.images[1][0][1][2].item<float>(), 5.0f / 255.0f);

  const FashionMnist test(Split::kTest, dir.path());
  EXPECT_EQ(test.size(), 2);
  EXPECT_TRUE(torch::equal(test.get_batch({0, 1}).labels, torch::tensor({4, 7}, torch::kLong)));
  EXPECT_CONTAINS(test.name(), ("test"));
  EXPECT_THROW(test.get_batch({2}), std::out_of_range);
}

TEST(DataFashionMnistTest, PlainFileIsPreferredOverGzipped) {
  TempDir dir;
  write_mnist_split(dir.path(), "train", 2, {1, 2}, /*gzip=*/false);
  write_mnist_split(dir.path(), "train", 3, {5, 6, 7}, /*gzip=*/true);
  EXPECT_EQ(FashionMnist(Split::kTrain, dir.path()).size(), 2);
}

TEST(DataFashionMnistTest, MissingFilesSayWhereAndHowToInstall) {
  TempDir dir;
  auto message = dataset_error([&] { FashionMnist(Split::kTrain, dir.path()); });
  EXPECT_CONTAINS(message, ("train-images-idx3-ubyte"));
  EXPECT_CONTAINS(message, (dir.path()));
  EXPECT_CONTAINS(message, ("the directory given"));
  EXPECT_CONTAINS(message, ("dataset-fashion-mnist"));
  EXPECT_CONTAINS(message, ("COLO_DATA_DIR"));
  EXPECT_CONTAINS(message, ("--data-dir"));

  write_mnist_split(dir.path(), "train", 2, {1, 2}, false);
  colo::files::remove(dir / "train-labels-idx1-ubyte");
  EXPECT_CONTAINS(dataset_error([&] { FashionMnist(Split::kTrain, dir.path()); }),
                  ("train-labels-idx1-ubyte or train-labels-idx1-ubyte.gz"));

  message = dataset_error([&] { FashionMnist(Split::kTest, dir / "nowhere"); });
  EXPECT_CONTAINS(message, ("t10k-images-idx3-ubyte"));
  EXPECT_CONTAINS(message, ("which does not exist"));
}

TEST(DataFashionMnistTest, DefaultDirectoryFollowsColoDataDir) {
  TempDir dir;
  {
    ScopedEnv env("COLO_DATA_DIR", dir.path());
    EXPECT_EQ(FashionMnist::default_directory(), dir / "fashion-mnist");
    EXPECT_EQ(Cifar10::default_directory(), dir / "cifar-10-batches-bin");
    EXPECT_CONTAINS(dataset_error([] { (void)FashionMnist(Split::kTrain); }),
                    ("the default directory, from COLO_DATA_DIR"));
    colo::files::create_directories(dir / "fashion-mnist");
    write_mnist_split(dir / "fashion-mnist", "t10k", 3, {1, 2, 3}, true);
    EXPECT_EQ(FashionMnist(Split::kTest).size(), 3);
  }
  ScopedEnv unset("COLO_DATA_DIR", "");
  EXPECT_EQ(FashionMnist::default_directory(), std::string("/usr/share/datasets/fashion-mnist"));
}

TEST(DataFashionMnistTest, ImageAndLabelCountsMustMatch) {
  TempDir dir;
  write_mnist_split(dir.path(), "train", 5, {1, 2, 3, 4}, false);
  const auto message = dataset_error([&] { FashionMnist(Split::kTrain, dir.path()); });
  EXPECT_CONTAINS(message, ((dir / "train-images-idx3-ubyte") + " holds 5 images"));
  EXPECT_CONTAINS(message, ((dir / "train-labels-idx1-ubyte") + " holds 4 labels"));
}

TEST(DataFashionMnistTest, LabelsMustBeClasses) {
  TempDir dir;
  write_mnist_split(dir.path(), "train", 3, {1, 10, 3}, false);
  const auto message = dataset_error([&] { FashionMnist(Split::kTrain, dir.path()); });
  EXPECT_CONTAINS(message, ("train-labels-idx1-ubyte: label 10 of image 1"));
}

TEST(DataFashionMnistTest, MalformedFileNamesIt) {
  TempDir dir;
  write_mnist_split(dir.path(), "train", 2, {1, 2}, false);
  write_file(dir / "train-images-idx3-ubyte", idx_bytes({2}, {1, 2}));  // an idx1 file in the images' place
  const auto message = dataset_error([&] { FashionMnist(Split::kTrain, dir.path()); });
  EXPECT_CONTAINS(message, ("train-images-idx3-ubyte: bad magic number"));
}

// The real data set, as Debian's dataset-fashion-mnist package installs it. Expected values were
// read from the files with Python's gzip module.
TEST(DataFashionMnistTest, RealDataset) {
  std::unique_ptr<FashionMnist> train;
  std::unique_ptr<FashionMnist> test;
  try {
    train = std::make_unique<FashionMnist>(Split::kTrain);
    test = std::make_unique<FashionMnist>(Split::kTest);
  } catch (const DatasetError& error) {
    FAIL() << "the real Fashion-MNIST is needed (the README's setup installs it: apt-get install "
              "dataset-fashion-mnist): "
           << error.what();
  }
  EXPECT_EQ(train->size(), 60000);
  EXPECT_EQ(test->size(), 10000);
  EXPECT_EQ(train->image_shape(), (ImageShape{1, 28, 28}));
  EXPECT_TRUE(
      torch::equal(train->labels().slice(0, 0, 10), torch::tensor({9, 0, 0, 3, 0, 2, 7, 2, 5, 5}, torch::kLong)));
  EXPECT_TRUE(
      torch::equal(test->labels().slice(0, 0, 10), torch::tensor({9, 2, 1, 1, 6, 1, 4, 6, 5, 7}, torch::kLong)));
  EXPECT_TRUE(torch::equal(torch::bincount(train->labels()), torch::full({10}, 6000, torch::kLong)));
  EXPECT_TRUE(torch::equal(torch::bincount(test->labels()), torch::full({10}, 1000, torch::kLong)));
  EXPECT_EQ(train->images()[0].sum().item<int64_t>(), 76247);
  EXPECT_EQ(train->images()[59999].sum().item<int64_t>(), 16684);
  EXPECT_EQ(test->images()[0].sum().item<int64_t>(), 33456);
  const auto row = train->get_batch({0}).images[0][0][10] * 255.0;
  const auto expected_row = torch::tensor(
      {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 193, 228, 218, 213, 198, 180, 212, 210, 211, 213, 223, 220, 243, 202, 0},
      torch::kFloat);
  EXPECT_TRUE(torch::allclose(row, expected_row, 0, 1e-3));
  // The default normalisation is the training split's statistics.
  double sum = 0;
  double sum_of_squares = 0;
  for (int64_t begin = 0; begin < 60000; begin += 10000) {  // in slices: 47M doubles at once would be 376 MB
    const auto pixels = train->images().slice(0, begin, begin + 10000).to(torch::kDouble) / 255.0;
    sum += pixels.sum().item<double>();
    sum_of_squares += pixels.square().sum().item<double>();
  }
  const double count = 60000.0 * 28 * 28;
  const double mean = sum / count;
  const auto normalization = train->default_normalization();
  EXPECT_NEAR(mean, normalization.mean[0], 1e-4);
  EXPECT_NEAR(std::sqrt(sum_of_squares / count - mean * mean), normalization.std[0], 1e-4);
}

// ---------------------------------------------------------------------------------------------
// CIFAR-10

// `labels.size()` records; pixel j of record r is (r * 7 + j) mod 256.
Bytes cifar_records(const Bytes& labels, int first_record = 0) {
  Bytes bytes;
  for (size_t r = 0; r < labels.size(); ++r) {
    bytes.push_back(labels[r]);
    for (int j = 0; j < 3072; ++j) bytes.push_back(static_cast<uint8_t>(((first_record + r) * 7 + j) % 256));
  }
  return bytes;
}

TEST(DataCifar10Test, ParsesRecordsChannelMajor) {
  TempDir dir;
  write_file(dir / "test_batch.bin", cifar_records({3, 0, 9}));
  const Cifar10 test(Split::kTest, dir.path());
  EXPECT_EQ(test.size(), 3);
  EXPECT_EQ(test.image_shape(), (ImageShape{3, 32, 32}));
  const Batch batch = test.get_batch({2, 0});
  EXPECT_TRUE(torch::equal(batch.labels, torch::tensor({9, 3}, torch::kLong)));
  const auto pixels = (batch.images * 255.0).round().to(torch::kLong);
  // Record 2, green plane (channel 1), row 5, column 31: pixel j = 1024 + 5 * 32 + 31.
  EXPECT_EQ(pixels[0][1][5][31].item<int64_t>(), (2 * 7 + 1024 + 5 * 32 + 31) % 256);
  EXPECT_EQ(pixels[1][2][31][0].item<int64_t>(), (2048 + 31 * 32) % 256);
  EXPECT_EQ(pixels[1][0][0][0].item<int64_t>(), 0);
}

TEST(DataCifar10Test, TrainSplitConcatenatesFiveBatchesPlainOrGzipped) {
  TempDir dir;
  const std::vector<Bytes> labels = {{1}, {2, 3}, {4}, {5}, {6, 7}};
  int record = 0;
  for (int i = 0; i < 5; ++i) {
    const Bytes bytes = cifar_records(labels[i], record);
    record += static_cast<int>(labels[i].size());
    const std::string name = "data_batch_" + std::to_string(i + 1) + ".bin";
    if (i == 2) {
      write_file(dir / (name + ".gz"), gzip_stored(bytes));
    } else {
      write_file(dir / name, bytes);
    }
  }
  const Cifar10 train(Split::kTrain, dir.path());
  EXPECT_EQ(train.size(), 7);
  EXPECT_TRUE(torch::equal(train.labels(), torch::tensor({1, 2, 3, 4, 5, 6, 7}, torch::kLong)));
  EXPECT_EQ(train.images()[6][0][0][1].item<uint8_t>(), (6 * 7 + 1) % 256);
  EXPECT_EQ(train.default_augmentation().crop_padding, 4);
}

TEST(DataCifar10Test, TruncatedFile) {
  TempDir dir;
  Bytes bytes = cifar_records({1, 2});
  bytes.resize(bytes.size() - 5);
  write_file(dir / "test_batch.bin", bytes);
  const auto message = dataset_error([&] { Cifar10(Split::kTest, dir.path()); });
  EXPECT_CONTAINS(message, (dir / "test_batch.bin"));
  EXPECT_CONTAINS(message, ("6141 bytes is not a whole number of 3073-byte"));
  EXPECT_CONTAINS(message, ("truncated after 1 records"));
}

TEST(DataCifar10Test, LabelsMustBeClasses) {
  TempDir dir;
  write_file(dir / "test_batch.bin", cifar_records({1, 2, 55}));
  EXPECT_CONTAINS(dataset_error([&] { Cifar10(Split::kTest, dir.path()); }), ("record 2 has label 55"));
}

TEST(DataCifar10Test, MissingFileSaysWhereAndWhat) {
  TempDir dir;
  write_file(dir / "data_batch_1.bin", cifar_records({1}));
  const auto message = dataset_error([&] { Cifar10(Split::kTrain, dir.path()); });
  EXPECT_CONTAINS(message, ("data_batch_2.bin"));
  EXPECT_CONTAINS(message, (dir.path()));
  EXPECT_CONTAINS(message, ("cifar-10-binary.tar.gz"));
  EXPECT_CONTAINS(message, ("COLO_DATA_DIR"));
}

// ---------------------------------------------------------------------------------------------
// Synthetic data and InMemoryDataset

TEST(DataSyntheticTest, SampleDependsOnlyOnSeedAndIndex) {
  const SyntheticDataset data(100, {3, 5, 4}, 7, /*seed=*/11);
  EXPECT_EQ(data.size(), 100);
  EXPECT_EQ(data.image_shape(), (ImageShape{3, 5, 4}));
  const Batch batch = data.get_batch({42, 3, 42});
  ASSERT_EQ(batch.images.sizes(), (std::vector<int64_t>{3, 3, 5, 4}));
  EXPECT_TRUE(torch::equal(batch.images[0], batch.images[2]));
  EXPECT_FALSE(torch::equal(batch.images[0], batch.images[1]));
  EXPECT_TRUE(torch::equal(batch.images[1], data.get_batch({3}).images[0]));
  EXPECT_TRUE(torch::equal(batch.images, SyntheticDataset(100, {3, 5, 4}, 7, 11).get_batch({42, 3, 42}).images));
  EXPECT_FALSE(torch::equal(batch.images, SyntheticDataset(100, {3, 5, 4}, 7, 12).get_batch({42, 3, 42}).images));
  EXPECT_GE(batch.images.min().item<float>(), 0.0f);
  EXPECT_LT(batch.images.max().item<float>(), 1.0f);

  std::vector<int64_t> all(100);
  std::iota(all.begin(), all.end(), 0);
  const auto labels = data.get_batch(all).labels;
  EXPECT_GE(labels.min().item<int64_t>(), 0);
  EXPECT_LT(labels.max().item<int64_t>(), 7);
  EXPECT_EQ((torch::bincount(labels) > 0).sum().item<int64_t>(), 7);
  EXPECT_EQ(labels[42].item<int64_t>(), batch.labels[0].item<int64_t>());
  EXPECT_THROW(data.get_batch({100}), std::out_of_range);
  EXPECT_THROW(SyntheticDataset(0, {1, 1, 1}, 2), std::invalid_argument);
}

TEST(DataInMemoryTest, ValidatesTensors) {
  const Normalization gray{{0.5}, {0.5}};
  EXPECT_CONTAINS(
      invalid_argument([&] {
        InMemoryDataset(torch::zeros({2, 1, 3, 3}, torch::kFloat), torch::zeros({2}, torch::kLong), 2, "x", gray);
      }),
      ("uint8 [N, C, H, W]"));
  EXPECT_CONTAINS(
      invalid_argument([&] {
        InMemoryDataset(torch::zeros({2, 1, 3, 3}, torch::kUInt8), torch::zeros({3}, torch::kLong), 2, "x", gray);
      }),
      ("N = 2"));
  EXPECT_CONTAINS(invalid_argument([&] {
                    InMemoryDataset(torch::zeros({2, 1, 3, 3}, torch::kUInt8), torch::tensor({0, 5}), 2, "x", gray);
                  }),
                  ("from 0 to 5"));
}

// ---------------------------------------------------------------------------------------------
// ImageTransform

TEST(DataTransformTest, NormalisesPerChannel) {
  const ImageTransform transform({{}, 0, Normalization{{0.1, 0.2}, {0.5, 0.25}}, 0}, {2, 3, 3});
  const auto images = torch::rand({4, 2, 3, 3});
  const auto out = transform(images, {});
  EXPECT_TRUE(torch::allclose(out.select(1, 0), (images.select(1, 0) - 0.1) / 0.5));
  EXPECT_TRUE(torch::allclose(out.select(1, 1), (images.select(1, 1) - 0.2) / 0.25));
}

TEST(DataTransformTest, ResizesBilinearlyWithHalfPixelCentres) {
  const ImageTransform transform({{}, 4, std::nullopt, 0}, {1, 2, 2});
  EXPECT_EQ(transform.output_shape(), (ImageShape{1, 4, 4}));
  const auto out = transform(torch::tensor({0.f, 1.f, 2.f, 3.f}).view({1, 1, 2, 2}), {});
  // Output pixel i samples input coordinate (i + 0.5) / 2 - 0.5, clamped at the border.
  const auto expected = torch::tensor({0.0f, 0.25f, 0.75f, 1.0f, 0.5f, 0.75f, 1.25f, 1.5f,  //
                                       1.5f, 1.75f, 2.25f, 2.5f, 2.0f, 2.25f, 2.75f, 3.0f})
                            .view({1, 1, 4, 4});
  EXPECT_TRUE(torch::allclose(out, expected));
}

TEST(DataTransformTest, RepeatsGrayscaleIntoChannelsAfterNormalising) {
  const ImageTransform transform({{}, 0, Normalization{{0.5}, {0.25}}, 3}, {1, 2, 2});
  EXPECT_EQ(transform.output_shape(), (ImageShape{3, 2, 2}));
  const auto images = torch::rand({2, 1, 2, 2});
  const auto out = transform(images, {});
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{2, 3, 2, 2}));
  EXPECT_TRUE(out.is_contiguous());
  for (int c = 0; c < 3; ++c) EXPECT_TRUE(torch::allclose(out.select(1, c), (images.select(1, 0) - 0.5) / 0.25));
}

// Every augmented image must be one of the (2p + 1)² crops of the zero-padded image, mirrored or
// not, built here pixel by pixel; over many seeds, every offset and both flips occur.
TEST(DataTransformTest, RandomCropAndFlipPickOneCandidatePerImage) {
  const int64_t p = 2;
  const int64_t h = 5;
  const int64_t w = 4;
  const ImageTransform transform({Augmentation{p, true}, 0, std::nullopt, 0}, {2, h, w});
  const int count = 400;
  const auto image = torch::rand({1, 2, h, w});
  const auto batch = image.expand({count, 2, h, w}).contiguous();
  std::vector<uint64_t> seeds(count);
  std::iota(seeds.begin(), seeds.end(), 1000);
  const auto out = transform(batch, seeds);
  const torch::Tensor source = image[0];
  const auto reference = source.accessor<float, 3>();
  std::set<std::tuple<int64_t, int64_t, bool>> seen;
  for (int i = 0; i < count; ++i) {
    const torch::Tensor augmented = out[i];
    const auto got = augmented.accessor<float, 3>();
    int matches = 0;
    for (int64_t top = 0; top <= 2 * p; ++top) {
      for (int64_t left = 0; left <= 2 * p; ++left) {
        for (const bool flip : {false, true}) {
          bool same = true;
          for (int64_t c = 0; c < 2 && same; ++c) {
            for (int64_t y = 0; y < h && same; ++y) {
              for (int64_t x = 0; x < w && same; ++x) {
                const int64_t row = top - p + y;  // in the unpadded image
                const int64_t column = left - p + (flip ? w - 1 - x : x);
                const bool inside = row >= 0 && row < h && column >= 0 && column < w;
                const float expected = inside ? reference[c][row][column] : 0.0f;
                same = got[c][y][x] == expected;
              }
            }
          }
          if (same) {
            ++matches;
            seen.insert({top, left, flip});
          }
        }
      }
    }
    ASSERT_GE(matches, 1) << "image " << i << " is no crop of the padded image";
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>((2 * p + 1) * (2 * p + 1) * 2));
  EXPECT_TRUE(torch::equal(out, transform(batch, seeds)));
  EXPECT_THROW(transform(batch, {1, 2}), std::invalid_argument);
}

TEST(DataTransformTest, ReportsEveryInvalidOption) {
  const auto message = invalid_argument([] {
    ImageTransform({Augmentation{-1, false}, -3, Normalization{{0.5}, {0.5}}, 2}, {3, 8, 8});
  });
  EXPECT_CONTAINS(message, ("crop_padding must be >= 0"));
  EXPECT_CONTAINS(message, ("image_size must be >= 0"));
  EXPECT_CONTAINS(message, ("channels = 2 does not fit 3-channel images"));
  EXPECT_CONTAINS(message, ("one mean and one std per image channel (3)"));
}

// ---------------------------------------------------------------------------------------------
// DistributedSampler

// Reference: torch.utils.data.DistributedSampler (PyTorch 2.15) over range(n), e.g.
//   s = DistributedSampler(range(10), num_replicas=3, rank=r, shuffle=True, seed=7); s.set_epoch(1); list(s)
TEST(DataSamplerTest, MatchesPyTorchDistributedSampler) {
  struct Case {
    int64_t n, replicas;
    uint64_t seed;
    int64_t epoch;
    bool drop_last;
    std::vector<std::vector<int64_t>> shards;
  };
  const std::vector<Case> cases = {
      {10, 3, 7, 0, false, {{5, 4, 9, 2}, {0, 1, 6, 5}, {3, 7, 8, 0}}},
      {10, 3, 7, 1, false, {{3, 1, 4, 9}, {5, 2, 7, 3}, {0, 6, 8, 5}}},
      {10, 3, 7, 1, true, {{3, 1, 4}, {5, 2, 7}, {0, 6, 8}}},
      {5, 4, 123, 2, false, {{0, 3}, {2, 0}, {1, 2}, {4, 1}}},
  };
  for (const auto& c : cases) {
    for (int64_t r = 0; r < c.replicas; ++r) {
      DistributedSampler sampler(c.n, c.replicas, r, /*shuffle=*/true, c.seed, c.drop_last);
      sampler.set_epoch(c.epoch);
      EXPECT_EQ(sampler.indices(), c.shards[static_cast<size_t>(r)])
          << "n=" << c.n << " replicas=" << c.replicas << " rank=" << r << " epoch=" << c.epoch;
    }
  }
}

TEST(DataSamplerTest, ShardsAreDisjointAndCoverTheDataSet) {
  for (int64_t n = 1; n <= 23; ++n) {
    for (int64_t replicas = 1; replicas <= 5; ++replicas) {
      for (const bool drop_last : {false, true}) {
        if (drop_last && n < replicas) continue;
        std::vector<int64_t> counts(static_cast<size_t>(n), 0);
        int64_t total = 0;
        for (int64_t r = 0; r < replicas; ++r) {
          DistributedSampler sampler(n, replicas, r, true, 5, drop_last);
          sampler.set_epoch(3);
          const auto shard = sampler.indices();
          ASSERT_EQ(static_cast<int64_t>(shard.size()), sampler.num_samples());
          for (const int64_t index : shard) {
            ASSERT_TRUE(index >= 0 && index < n);
            ++counts[static_cast<size_t>(index)];
          }
          total += static_cast<int64_t>(shard.size());
        }
        const std::string where =
            "n=" + std::to_string(n) + " replicas=" + std::to_string(replicas) + (drop_last ? " drop_last" : " padded");
        if (drop_last) {
          EXPECT_EQ(total, n / replicas * replicas) << where;
          EXPECT_EQ(*std::max_element(counts.begin(), counts.end()), 1) << where;  // disjoint
        } else {
          EXPECT_EQ(total, (n + replicas - 1) / replicas * replicas) << where;
          EXPECT_EQ(*std::min_element(counts.begin(), counts.end()), n >= replicas ? 1 : replicas / n) << where;
          // The padding repeats as few samples as possible: total - n extra appearances.
          EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), int64_t{0}), total) << where;
          if (n >= replicas) {
            EXPECT_LE(*std::max_element(counts.begin(), counts.end()), 2) << where;
          }
        }
      }
    }
  }
}

TEST(DataSamplerTest, EpochReshufflesDeterministically) {
  DistributedSampler a(1000, 2, 1, true, 42);
  DistributedSampler b(1000, 2, 1, true, 42);
  const auto epoch0 = a.indices();
  a.set_epoch(1);
  const auto epoch1 = a.indices();
  EXPECT_NE(epoch0, epoch1);
  b.set_epoch(1);
  EXPECT_EQ(b.indices(), epoch1);
  a.set_epoch(0);
  EXPECT_EQ(a.indices(), epoch0);
  EXPECT_NE(DistributedSampler(1000, 2, 1, true, 43).indices(), epoch0);
  // The same epoch on every rank is one permutation: shards of ranks 0 and 1 interleave it.
  DistributedSampler rank0(1000, 2, 0, true, 42);
  std::set<int64_t> all(epoch0.begin(), epoch0.end());
  const auto other = rank0.indices();
  all.insert(other.begin(), other.end());
  EXPECT_EQ(all.size(), 1000u);
}

TEST(DataSamplerTest, WithoutShuffleShardsAreStrided) {
  DistributedSampler sampler(10, 4, 1, /*shuffle=*/false);
  sampler.set_epoch(5);
  EXPECT_EQ(sampler.indices(), (std::vector<int64_t>{1, 5, 9}));
  EXPECT_EQ(sampler.num_samples(), 3);
  EXPECT_EQ(sampler.total_size(), 12);
  EXPECT_EQ(DistributedSampler(10, 4, 3, false).indices(), (std::vector<int64_t>{3, 7, 1}));  // wraps
  EXPECT_EQ(DistributedSampler(10, 4, 3, false, 0, true).indices(), (std::vector<int64_t>{3, 7}));
}

TEST(DataSamplerTest, RejectsInvalidArguments) {
  EXPECT_CONTAINS(invalid_argument([] { DistributedSampler(10, 2, 2); }), ("data-parallel"));
  EXPECT_THROW(DistributedSampler(10, 0, 0), std::invalid_argument);
  EXPECT_THROW(DistributedSampler(0, 1, 0), std::invalid_argument);
  EXPECT_THROW(DistributedSampler(3, 4, 0, true, 0, /*drop_last=*/true), std::invalid_argument);
  DistributedSampler sampler(10);
  EXPECT_THROW(sampler.set_epoch(-1), std::invalid_argument);
}

// ---------------------------------------------------------------------------------------------
// DataLoader

// Image i is filled with the value i (so a batch says which samples it holds); label i mod 10.
std::shared_ptr<InMemoryDataset> index_dataset(int64_t size, int64_t side = 4) {
  auto images = torch::arange(size, torch::kLong).to(torch::kUInt8).view({size, 1, 1, 1}).expand({size, 1, side, side});
  return std::make_shared<InMemoryDataset>(images.contiguous(), torch::arange(size) % 10, 10, "index",
                                           Normalization{{0.5}, {0.25}}, Augmentation{1, true});
}

// Sample indices of a batch from index_dataset without augmentation or normalisation.
std::vector<int64_t> sample_ids(const Batch& batch) {
  const auto ids = (batch.images.select(1, 0).select(1, 0).select(1, 0) * 255.0).round().to(torch::kLong);
  return std::vector<int64_t>(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
}

std::vector<Batch> drain(DataLoader& loader) {
  std::vector<Batch> batches;
  while (auto batch = loader.next()) batches.push_back(std::move(*batch));
  return batches;
}

void expect_same_batches(const std::vector<Batch>& a, const std::vector<Batch>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::equal(a[i].images, b[i].images)) << what << ": images of batch " << i;
    EXPECT_TRUE(torch::equal(a[i].labels, b[i].labels)) << what << ": labels of batch " << i;
  }
}

TEST(DataLoaderTest, IteratesTheShardOfTheEpochInBatches) {
  const auto data = index_dataset(23);
  for (const bool drop_last : {false, true}) {
    DataLoader loader(
        data, DataLoaderOptions(4).shuffle(true).seed(9).num_replicas(2).rank(1).normalize(false).drop_last(drop_last));
    loader.set_epoch(2);
    EXPECT_EQ(loader.num_batches(), drop_last ? 2 : 3);  // 12 samples padded, or 11 and 2 full batches
    const auto batches = drain(loader);
    ASSERT_EQ(static_cast<int64_t>(batches.size()), loader.num_batches());
    std::vector<int64_t> seen;
    for (const auto& batch : batches) {
      const auto ids = sample_ids(batch);
      seen.insert(seen.end(), ids.begin(), ids.end());
      EXPECT_TRUE(torch::equal(batch.labels, torch::tensor(ids) % 10));
    }
    auto expected = loader.sampler().indices();
    if (drop_last) expected.resize(8);
    EXPECT_EQ(seen, expected);
    if (!drop_last) {
      EXPECT_EQ(batches.back().size(), 4);
    }
    EXPECT_FALSE(loader.next().has_value());
    EXPECT_EQ(loader.state(), (DataLoaderState{2, loader.num_batches()}));
  }
  DataLoader short_tail(data, DataLoaderOptions(5).normalize(false));
  const auto batches = drain(short_tail);
  ASSERT_EQ(batches.size(), 5u);
  EXPECT_EQ(sample_ids(batches.back()), (std::vector<int64_t>{20, 21, 22}));
}

// With drop_last, batch k of R replicas at batch size B holds exactly single-process batch k at
// batch size R·B, each sample augmented identically.
TEST(DataLoaderTest, ReplicasTogetherFormTheSingleProcessBatch) {
  const auto data = index_dataset(50);
  const auto options = DataLoaderOptions(4).shuffle(true).seed(3).drop_last(true).augment(true).prefetch(0);
  DataLoader single(data, DataLoaderOptions(options).batch_size(12));
  single.set_epoch(1);
  const auto reference = drain(single);
  ASSERT_EQ(reference.size(), 4u);
  std::vector<std::vector<Batch>> shards;
  for (int64_t r = 0; r < 3; ++r) {
    DataLoader loader(data, DataLoaderOptions(options).num_replicas(3).rank(r));
    loader.set_epoch(1);
    shards.push_back(drain(loader));
    ASSERT_EQ(shards.back().size(), 4u);
  }
  for (size_t k = 0; k < reference.size(); ++k) {
    std::vector<torch::Tensor> images;
    std::vector<torch::Tensor> labels;
    for (const auto& shard : shards) {
      images.push_back(shard[k].images);
      labels.push_back(shard[k].labels);
    }
    // Rows (label, pixels…) sorted: the same multiset of augmented samples on both sides.
    auto key = [](const torch::Tensor& batch_images, const torch::Tensor& batch_labels) {
      auto flat = torch::cat({batch_labels.to(torch::kFloat).unsqueeze(1), batch_images.flatten(1)}, 1);
      std::vector<std::vector<float>> rows;
      for (int64_t i = 0; i < flat.size(0); ++i) {
        auto row = flat[i].contiguous();
        rows.emplace_back(row.data_ptr<float>(), row.data_ptr<float>() + row.numel());
      }
      std::sort(rows.begin(), rows.end());
      return rows;
    };
    EXPECT_EQ(key(torch::cat(images), torch::cat(labels)), key(reference[k].images, reference[k].labels))
        << "batch " << k;
  }
}

TEST(DataLoaderTest, PrefetchingGivesTheSameBatches) {
  const auto shared = std::make_shared<SyntheticDataset>(37, ImageShape{1, 6, 6}, 5, 1);
  auto options = DataLoaderOptions(4)
                     .shuffle(true)
                     .seed(17)
                     .augment(true)
                     .augmentation(Augmentation{2, true})
                     .image_size(8)
                     .channels(3)
                     .num_replicas(2)
                     .rank(0);
  std::vector<std::vector<Batch>> runs;
  for (const int64_t prefetch : {0, 1, 3}) {
    DataLoader loader(shared, DataLoaderOptions(options).prefetch(prefetch));
    std::vector<Batch> batches;
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      loader.set_epoch(epoch);
      auto epoch_batches = drain(loader);
      batches.insert(batches.end(), epoch_batches.begin(), epoch_batches.end());
    }
    ASSERT_EQ(batches.size(), 10u);
    EXPECT_EQ(batches[0].images.sizes(), (std::vector<int64_t>{4, 3, 8, 8}));
    runs.push_back(std::move(batches));
  }
  expect_same_batches(runs[0], runs[1], "prefetch 1");
  expect_same_batches(runs[0], runs[2], "prefetch 3");
  // The epochs differ (order and augmentation).
  EXPECT_FALSE(torch::equal(runs[0][0].images, runs[0][5].images));
}

TEST(DataLoaderTest, ResumesMidEpochExactly) {
  // Crop and flip; then with timm's RandAugment and random erasing too (issue 38), whose draws
  // also come from each image's seed.
  Augmentation timm{1, true};
  timm.rand_augment = "rand-m9-mstd0.5-inc1";
  timm.random_erasing = {0.5, ErasingMode::kPixel};
  for (const auto& [shape, augmentation] :
       {std::pair{ImageShape{2, 5, 5}, Augmentation{1, true}}, std::pair{ImageShape{3, 7, 6}, timm}}) {
    const auto data = std::make_shared<SyntheticDataset>(45, shape, 4, 8);
    const auto options = DataLoaderOptions(4).shuffle(true).seed(5).augment(true).augmentation(augmentation);
    for (const int64_t prefetch : {0, 2}) {
      DataLoader full(data, DataLoaderOptions(options).prefetch(prefetch));
      full.set_epoch(2);
      const auto epoch2 = drain(full);
      full.set_epoch(3);
      const auto epoch3 = drain(full);

      DataLoader first(data, DataLoaderOptions(options).prefetch(prefetch));
      first.set_epoch(2);
      for (int i = 0; i < 3; ++i) ASSERT_TRUE(first.next().has_value());
      const DataLoaderState state = first.state();
      EXPECT_EQ(state, (DataLoaderState{2, 3}));

      DataLoader resumed(data, DataLoaderOptions(options).prefetch(prefetch));
      resumed.load_state(state);
      EXPECT_EQ(resumed.epoch(), 2);
      const auto rest = drain(resumed);
      expect_same_batches(rest, std::vector<Batch>(epoch2.begin() + 3, epoch2.end()),
                          "resumed epoch, prefetch " + std::to_string(prefetch));
      resumed.set_epoch(3);
      expect_same_batches(drain(resumed), epoch3, "epoch after resuming");
      // Going back within a loader works too.
      resumed.load_state({2, 10});
      expect_same_batches(drain(resumed), std::vector<Batch>(epoch2.begin() + 10, epoch2.end()), "load_state again");
    }
  }
}

TEST(DataLoaderTest, LoadStateRejectsAStateFromAnotherLoader) {
  DataLoader loader(index_dataset(20), DataLoaderOptions(4));
  EXPECT_CONTAINS(invalid_argument([&] { loader.load_state({0, 6}); }), ("5 batches per epoch"));
  EXPECT_THROW(loader.load_state({-1, 0}), std::invalid_argument);
  loader.load_state({1, 5});  // the end of epoch 1 is a valid place to be
  EXPECT_FALSE(loader.next().has_value());
}

// colo-run --elastic: a state saved by 4 replicas of 3 images a batch resumes 3 replicas of 2 at
// the same image of the epoch's order (batch k of all replicas together is images [k * R * B,
// (k + 1) * R * B) of the permutation), and refuses a shape whose batches do not land there.
TEST(DataLoaderTest, AStateSavedOverOtherReplicasResumesAtTheSameImage) {
  const auto data = index_dataset(60);
  auto options = [](int64_t batch, int64_t replicas, int64_t rank) {
    return DataLoaderOptions(batch).shuffle(true).seed(3).drop_last(true).normalize(false).num_replicas(replicas).rank(
        rank);
  };
  DataLoader saver(data, options(3, 4, 2));
  saver.set_epoch(1);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(saver.next().has_value());
  const DataLoaderState state = saver.state();
  EXPECT_EQ(state.images_per_batch, 12);

  DataLoader whole(data, options(12, 1, 0));  // the epoch as one replica takes it, 12 at a time
  whole.set_epoch(1);
  const auto reference = drain(whole);
  ASSERT_EQ(reference.size(), 5u);
  std::vector<std::vector<int64_t>> resumed(2);  // images of the 3 replicas' next 4 batches, 12 per pair
  for (int64_t rank = 0; rank < 3; ++rank) {
    DataLoader loader(data, options(2, 3, rank));
    loader.load_state(state);
    EXPECT_EQ(loader.state().next_batch, 4);
    for (int k = 0; k < 4; ++k) {
      const auto ids = sample_ids(*loader.next());
      resumed[k / 2].insert(resumed[k / 2].end(), ids.begin(), ids.end());
    }
  }
  for (int step = 0; step < 2; ++step) {
    auto expected = sample_ids(reference[2 + step]);
    std::sort(expected.begin(), expected.end());
    std::sort(resumed[step].begin(), resumed[step].end());
    EXPECT_EQ(resumed[step], expected) << "step " << step;
  }
  // 24 images are no whole number of batches of 10 (5 replicas x 2).
  DataLoader five(data, options(2, 5, 0));
  EXPECT_CONTAINS(invalid_argument([&] { five.load_state(state); }), ("no whole number of this loader's batches of 10"));
  // 24 images are 2 batches of 12 on 2 replicas x 6 and 1 replica x 12, and exactly the end of
  // the epoch for 1 replica x 24.
  DataLoader two(data, options(6, 2, 1));
  two.load_state(state);
  EXPECT_EQ(two.state().next_batch, 2);
  DataLoader one(data, options(24, 1, 0));
  one.load_state(state);
  EXPECT_EQ(one.state().next_batch, 1);
  // A state without its unit (saved before it was recorded) is taken in the loader's own.
  DataLoader old(data, options(2, 3, 0));
  old.load_state({1, 2});
  EXPECT_EQ(old.state().next_batch, 2);
}

TEST(DataLoaderTest, RangeForContinuesFromTheCurrentPosition) {
  const auto data = index_dataset(30);
  DataLoader reference(data, DataLoaderOptions(4).shuffle(true));
  const auto expected = drain(reference);
  DataLoader loader(data, DataLoaderOptions(4).shuffle(true));
  std::vector<Batch> batches;
  batches.push_back(*loader.next());
  for (Batch& batch : loader) batches.push_back(batch);
  expect_same_batches(batches, expected, "range-for");
  loader.reset();
  EXPECT_EQ(loader.state(), (DataLoaderState{0, 0}));
  expect_same_batches(drain(loader), expected, "after reset");
}

TEST(DataLoaderTest, ReshardEqualsAFreshLoaderOfThatShard) {
  const auto data = index_dataset(41);
  const auto options = DataLoaderOptions(3).shuffle(true).seed(1).augment(true);
  DataLoader loader(data, options);
  loader.set_epoch(4);
  loader.next();
  loader.reshard(4, 3);
  EXPECT_EQ(loader.state(), (DataLoaderState{4, 0}));
  EXPECT_EQ(loader.options().num_replicas(), 4);
  EXPECT_EQ(loader.sampler().rank(), 3);
  DataLoader fresh(data, DataLoaderOptions(options).num_replicas(4).rank(3));
  fresh.set_epoch(4);
  expect_same_batches(drain(loader), drain(fresh), "resharded");
  EXPECT_THROW(loader.reshard(2, 2), std::invalid_argument);
}

TEST(DataLoaderTest, AugmentationAndNormalisationFollowTheOptions) {
  const auto data = index_dataset(8);
  const std::vector<int64_t> all = {0, 1, 2, 3, 4, 5, 6, 7};
  const auto raw = data->get_batch(all).images;

  DataLoader plain(data, DataLoaderOptions(8).normalize(false));
  EXPECT_TRUE(torch::equal(plain.next()->images, raw));

  DataLoader normalised(data, DataLoaderOptions(8));  // the data set's statistics: mean 0.5, std 0.25
  EXPECT_TRUE(torch::allclose(normalised.next()->images, (raw - 0.5) / 0.25));
  DataLoader custom(data, DataLoaderOptions(8).normalization(Normalization{{0.0}, {2.0}}));
  EXPECT_TRUE(torch::allclose(custom.next()->images, raw / 2.0));

  // Augmentation (the data set's default: padding 1 and flips) changes images, differently per epoch.
  DataLoader augmented(data, DataLoaderOptions(8).normalize(false).augment(true));
  const auto epoch0 = augmented.next()->images;
  EXPECT_FALSE(torch::equal(epoch0, raw));
  EXPECT_EQ(epoch0.sizes(), raw.sizes());
  augmented.set_epoch(1);
  EXPECT_FALSE(torch::equal(augmented.next()->images, epoch0));
  DataLoader no_crop(data, DataLoaderOptions(8).normalize(false).augment(true).augmentation(Augmentation{0, true}));
  EXPECT_TRUE(torch::equal(no_crop.next()->images, raw));  // constant images are their own mirror image

  DataLoader resized(data, DataLoaderOptions(2).image_size(6).channels(3));
  EXPECT_EQ(resized.image_shape(), (ImageShape{3, 6, 6}));
  EXPECT_EQ(resized.next()->images.sizes(), (std::vector<int64_t>{2, 3, 6, 6}));
}

TEST(DataLoaderTest, ReportsEveryInvalidOption) {
  const auto message = invalid_argument([] {
    DataLoader(index_dataset(10), DataLoaderOptions(0).prefetch(-1).num_replicas(2).rank(2).normalization(
                                      Normalization{{0.1, 0.2}, {1.0, 1.0}}));
  });
  EXPECT_CONTAINS(message, ("batch_size must be positive"));
  EXPECT_CONTAINS(message, ("prefetch must be >= 0"));
  EXPECT_CONTAINS(message, ("rank 2 of 2 replicas"));
  EXPECT_CONTAINS(message, ("one mean and one std per image channel (1)"));
  EXPECT_CONTAINS(
      invalid_argument([] { DataLoader(index_dataset(10), DataLoaderOptions(6).num_replicas(2).drop_last(true)); }),
      ("no batches at all"));
  EXPECT_CONTAINS(invalid_argument([] { DataLoader(nullptr, DataLoaderOptions(1)); }), ("null"));
  if (!torch::cuda::is_available()) {
    EXPECT_CONTAINS(invalid_argument([] { DataLoader(index_dataset(10), DataLoaderOptions(1).device(torch::kCUDA)); }),
                    ("no GPU is visible"));
  }
}

// A data set whose sample `bad` cannot be read, and which counts its reads.
class FlakyDataset : public InMemoryDataset {
 public:
  FlakyDataset(int64_t bad, bool wrong_shape = false)
      : InMemoryDataset(torch::zeros({12, 1, 2, 2}, torch::kUInt8), torch::zeros({12}, torch::kLong), 2, "flaky",
                        Normalization{{0.0}, {1.0}}),
        bad_(bad),
        wrong_shape_(wrong_shape) {}
  Batch get_batch(const std::vector<int64_t>& indices) const override {
    if (std::find(indices.begin(), indices.end(), bad_) != indices.end()) {
      throw std::runtime_error("cannot read sample " + std::to_string(bad_));
    }
    Batch batch = InMemoryDataset::get_batch(indices);
    if (wrong_shape_) batch.images = batch.images.flatten(1);
    return batch;
  }

 private:
  int64_t bad_;
  bool wrong_shape_;
};

TEST(DataLoaderTest, ErrorsInThePrefetchThreadReachTheCaller) {
  for (const int64_t prefetch : {0, 2}) {
    DataLoader loader(std::make_shared<FlakyDataset>(5), DataLoaderOptions(2).prefetch(prefetch));
    ASSERT_TRUE(loader.next().has_value());
    ASSERT_TRUE(loader.next().has_value());
    for (int attempt = 0; attempt < 2; ++attempt) {  // the failing batch is attempted again
      try {
        loader.next();
        ADD_FAILURE() << "no exception";
      } catch (const std::runtime_error& error) {
        EXPECT_CONTAINS(error.what(), ("cannot read sample 5"));
      }
      EXPECT_EQ(loader.state(), (DataLoaderState{0, 2}));
    }
    loader.load_state({0, 3});
    EXPECT_EQ(drain(loader).size(), 3u);
  }
  DataLoader wrong(std::make_shared<FlakyDataset>(-1, true), DataLoaderOptions(2));
  try {
    wrong.next();
    ADD_FAILURE() << "no exception";
  } catch (const std::logic_error& error) {
    EXPECT_CONTAINS(error.what(), ("flaky: get_batch of 2 indices must return float images [2, 1, 2, 2]"));
  }
}

TEST(DataLoaderTest, MovesAndStopsMidEpoch) {
  const auto data = index_dataset(40);
  DataLoader reference(data, DataLoaderOptions(3).shuffle(true).prefetch(0));
  const auto expected = drain(reference);
  DataLoader loader(data, DataLoaderOptions(3).shuffle(true).prefetch(4));
  std::vector<Batch> batches;
  batches.push_back(*loader.next());
  DataLoader moved(std::move(loader));
  batches.push_back(*moved.next());
  DataLoader assigned(data, DataLoaderOptions(3));
  assigned = std::move(moved);
  for (Batch& batch : assigned) batches.push_back(batch);
  expect_same_batches(batches, expected, "moved loader");
  // Destroying loaders whose threads are still filling their queues must not hang.
  for (int i = 0; i < 5; ++i) {
    DataLoader busy(data, DataLoaderOptions(1).prefetch(8));
    busy.next();
  }
}

// The CUDA path (GPU machines only): pinned host memory, copies on the prefetch thread's own
// stream, and the caller's stream waiting for them. The caller computes on a side stream, as
// pipeline schedules do; without the wait, the multiplication would read half-copied images.
TEST(DataLoaderTest, CudaBatchesEqualCpuBatches) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto data = std::make_shared<SyntheticDataset>(300, ImageShape{3, 32, 32}, 10, 4);
  const auto options =
      DataLoaderOptions(32).shuffle(true).augment(true).augmentation(Augmentation{4, true}).image_size(64);
  DataLoader cpu(data, DataLoaderOptions(options).prefetch(0));
  const auto expected = drain(cpu);
  const torch::Device cuda(torch::kCUDA, 0);
  for (const int64_t prefetch : {0, 3}) {
    DataLoader loader(data, DataLoaderOptions(options).device(torch::Device(torch::kCUDA)).prefetch(prefetch));
    EXPECT_EQ(loader.options().device(), cuda);  // a bare "cuda" means the current device
    const c10::impl::VirtualGuardImpl guard_impl(c10::DeviceType::CUDA);
    const c10::StreamGuard on_side_stream(guard_impl.getStreamFromGlobalPool(cuda));
    std::vector<Batch> batches;
    while (auto batch = loader.next()) {
      EXPECT_EQ(batch->images.device(), cuda);
      EXPECT_EQ(batch->labels.device(), cuda);
      batches.push_back({(batch->images * 1.0f).cpu(), batch->labels.cpu()});
    }
    expect_same_batches(batches, expected, "CUDA, prefetch " + std::to_string(prefetch));
  }
}

}  // namespace
}  // namespace colo::data
