#pragma once

#include <colo/data/dataset.h>
#include <colo/data/dataset_error.h>
#include <colo/data/image_resample.h>
#include <torch/arg.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace colo::data {

// Which decoder turns an ImageFolder's JPEGs into the batch's pixels (issue 38):
//  kCpu: libjpeg-turbo in the loader's worker threads, as always (the default).
//  kNvjpeg: nvJPEG on the loader's CUDA device: the workers read the files' bytes, nvJPEG decodes
//    a batch at once (H100/H200's hardware JPEG decoder where the GPU has one and the file is a
//    baseline JPEG, else nvJPEG's CUDA decoder), and a CUDA kernel crops, resizes and flips into
//    the batch on the device. PNGs, CMYK JPEGs and files nvJPEG refuses are decoded on the CPU,
//    as kCpu would. Asked for explicitly, it is an error where it cannot run: a build of colo
//    without nvJPEG (at construction), a loader that delivers to the CPU, a GPU nvJPEG cannot use
//    (when the DataLoader is built), so that a run never measures the CPU decoder by mistake.
//  kAuto: kNvjpeg where it can run, else kCpu; decoder_in_use() says which and why.
// The crop boxes and flips are drawn on the CPU from the same per-sample seeds either way, so
// labels, random choices and a resumed loader's batches are the same; only the pixels differ, by
// what the two JPEG decoders' IDCT and chroma upsampling differ (docs/architecture.md bounds it).
enum class ImageDecoder { kCpu, kNvjpeg, kAuto };

// "cpu", "nvjpeg" or "auto"; anything else is a std::invalid_argument listing them.
ImageDecoder parse_image_decoder(const std::string& name);
const char* to_string(ImageDecoder decoder);
// Whether this build of colo has nvJPEG: a CUDA build that found nvjpeg.h and libnvjpeg when it
// was configured (the CUDA toolkit's, or PyPI's nvidia-nvjpeg wheel's; COLO_NVJPEG_ROOT points at
// another).
bool nvjpeg_compiled();

struct ImageFolderOptions {
  /* implicit */ ImageFolderOptions(int64_t image_size = 224) : image_size_(image_size) {}

  // ImageNet's channel statistics (torchvision's), the default normalisation.
  static Normalization imagenet_normalization() { return {{0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}}; }

  // Height and width of every image the data set returns.
  TORCH_ARG(int64_t, image_size);
  // Evaluation (get_batch): the shorter side is resized to floor(image_size / crop_fraction), then
  // the centre image_size x image_size is cut out (timm's crop_pct; 0.875 is torchvision's
  // 256 -> 224, timm's ViTs use 0.9).
  TORCH_ARG(double, crop_fraction) = 0.875;
  // Training (get_augmented_batch, the DataLoader's augment(true)): torchvision's
  // RandomResizedCrop(image_size) with these scale and ratio ranges, then a horizontal flip with
  // probability 1/2 if horizontal_flip.
  TORCH_ARG(RandomResizedCropParams, random_resized_crop) = {};
  TORCH_ARG(bool, horizontal_flip) = true;
  // An image that cannot be read or decoded (kMaxImagePixels in image_codec.h included) is an
  // error naming the file (false), or is replaced in its batch by the next readable image of the
  // data set and counted (true: num_skipped(), skipped_files()). A symbolic link that leads
  // nowhere is an error at construction (false), or is left out and listed in scan_notes() (true).
  TORCH_ARG(bool, skip_unreadable) = false;
  // What the DataLoader normalises with unless told otherwise: ImageNet's statistics by default;
  // a pretrained model's own (0.5, 0.5, 0.5 for the original ViTs) when fine-tuning one.
  TORCH_ARG(Normalization, normalization) = imagenet_normalization();
  // Where JPEGs are decoded: ImageDecoder above.
  TORCH_ARG(ImageDecoder, decoder) = ImageDecoder::kCpu;
};

// Images in torchvision's ImageFolder layout: one sub-directory of `root` per class, the classes
// sorted by name (label i is the i-th name), each holding JPEG and PNG files (.jpg, .jpeg, .png in
// any case) at any depth, taken in torchvision's order (directories sorted by path, files by
// name). Other files are ignored, and so are hidden entries (names starting with a dot, such as
// .ipynb_checkpoints, which torchvision would take for a class). Symbolic links are followed as
// torchvision follows them, except back into a directory the walk is in (a cycle, which
// torchvision follows until the path is too long): such a link is listed in scan_notes() instead.
// Images are read when a batch
// asks for them, by libjpeg-turbo or libpng, into float RGB [3, image_size, image_size] in [0, 1].
// Safe to use from several loader threads at once.
class ImageFolder : public Dataset {
 public:
  // Throws DatasetError when root is not a directory, has no class directories, or a class has no
  // image (naming them).
  explicit ImageFolder(std::string root, ImageFolderOptions options = {});
  ~ImageFolder() override;

  std::string name() const override;
  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  int64_t num_classes() const override { return static_cast<int64_t>(classes_.size()); }
  ImageShape image_shape() const override { return {3, options_.image_size(), options_.image_size()}; }
  // Evaluation transform: resize, centre crop.
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  // Training transform: random resized crop, flip; each image's draws are a function of its seed.
  Batch get_augmented_batch(const std::vector<int64_t>& indices,
                            const std::vector<uint64_t>& sample_seeds) const override;
  Normalization default_normalization() const override { return options_.normalization(); }
  // With decoder kNvjpeg or kAuto and a CUDA device that nvJPEG can use: the batch decoded,
  // cropped, resized and flipped on `device` (image_folder_gpu.cpp); otherwise nullopt.
  std::optional<Batch> get_device_batch(const std::vector<int64_t>& indices, const std::vector<uint64_t>* sample_seeds,
                                        const torch::Device& device) const override;
  std::string device_problem(const torch::Device& device) const override;
  // One line for a program to show: which decoder a loader delivering to `device` gets, and why
  // not nvJPEG where it was asked for (kAuto) and cannot run. Sets nvJPEG up on the device.
  std::string decoder_in_use(const torch::Device& device) const;
  // Where the GPU decoding's time went so far on `device`, per image and phase (reading the files,
  // nvJPEG's parse, submit and wait, the resize's launch, the last wait), wall and CPU time summed
  // over the loader's threads; empty where nothing was decoded there. For benchmarks: a loader that
  // keeps up alone but not during training shows which step slows.
  std::string gpu_decode_phases(const torch::Device& device) const;

  const std::string& root() const { return root_; }
  const ImageFolderOptions& options() const { return options_; }
  const std::vector<std::string>& classes() const { return classes_; }
  const std::string& path(int64_t index) const;
  int64_t label(int64_t index) const;

  // What the scan of the directories left out, one "path: reason" line each (symbolic-link cycles;
  // with skip_unreadable, links that lead nowhere): a program shows them to its user.
  const std::vector<std::string>& scan_notes() const { return scan_notes_; }

  // With skip_unreadable: how many reads failed so far, and the first few "path: reason" lines.
  int64_t num_skipped() const { return skipped_.load(); }
  std::vector<std::string> skipped_files() const;

 private:
  struct Sample {
    std::string path;
    int64_t label;
  };
  // Reads sample `index` into out (3 x image_size x image_size floats); augments with `seed` when
  // `augment`. Returns the label.
  void read(int64_t index, bool augment, uint64_t seed, float* out) const;
  Batch read_batch(const std::vector<int64_t>& indices, const std::vector<uint64_t>* seeds) const;
  // Reads the image for one batch slot into out, from sample `index` on; with skip_unreadable an
  // unreadable one gives its place to the next readable one. Returns the sample read.
  int64_t read_slot(int64_t index, bool augment, uint64_t seed, float* out) const;
  // Counts and logs an unreadable image (skip_unreadable), or rethrows the error.
  void skip_or_throw(const DatasetError& error, int64_t attempt) const;

  // nvJPEG's state per CUDA device, set up on first use (image_folder_gpu.cpp); null until then.
  struct GpuDecoding;
  // The device's nvJPEG set-up, or null with *why_not set when nvJPEG cannot run there.
  std::shared_ptr<GpuDecoding> gpu_decoding(const torch::Device& device, std::string* why_not) const;
  // get_device_batch's work once nvJPEG is set up (builds with nvJPEG only).
  Batch gpu_batch(GpuDecoding& gpu, const std::vector<int64_t>& indices, const std::vector<uint64_t>* seeds,
                  const torch::Device& device) const;

  std::string root_;
  ImageFolderOptions options_;
  std::vector<std::string> classes_;
  std::vector<Sample> samples_;
  std::vector<std::string> scan_notes_;
  mutable std::atomic<int64_t> skipped_{0};
  struct SkipLog;
  std::unique_ptr<SkipLog> skip_log_;
  // Per CUDA device, what gpu_decoding() set up or why it could not (image_folder_gpu.cpp).
  struct GpuDecoders;
  static std::shared_ptr<GpuDecoders> make_gpu_decoders();
  std::shared_ptr<GpuDecoders> gpu_;
};

}  // namespace colo::data
