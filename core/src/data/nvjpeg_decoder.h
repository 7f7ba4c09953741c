// nvJPEG, as ImageFolder's GPU decoder uses it (CUDA builds that found nvJPEG: COLO_WITH_NVJPEG).
// One NvjpegDecoder per CUDA device, shared by the loader's worker threads: the nvJPEG handles are
// thread-safe, and each decode() call takes decoding states of its own from a pool.
#pragma once

#ifdef COLO_WITH_NVJPEG
#include <cuda_runtime_api.h>
#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "decode_phases.h"

namespace colo::data::detail {

struct NvjpegInput {
  const uint8_t* data = nullptr;
  size_t size = 0;
};

// Where decode() put one image: 8-bit RGB, interleaved, rows of width * 3 bytes, at `offset` bytes
// into the storage tensor; or why nvJPEG could not decode it (ok false: the caller decodes it on
// the CPU).
struct NvjpegOutput {
  bool ok = false;
  std::string error;
  int64_t offset = 0;
  int64_t height = 0;
  int64_t width = 0;
  bool hardware = false;  // by the GPU's JPEG engines (else by nvJPEG's CUDA decoder)
};

class NvjpegDecoder {
 public:
  // Sets nvJPEG up on CUDA device `device`: the hardware decoder where the GPU has one (A100,
  // H100, H200) and nvJPEG's default (CUDA) decoder beside it. Throws std::runtime_error saying
  // why when nvJPEG cannot run there.
  explicit NvjpegDecoder(int device);
  ~NvjpegDecoder();
  NvjpegDecoder(const NvjpegDecoder&) = delete;
  NvjpegDecoder& operator=(const NvjpegDecoder&) = delete;

  // Decodes the files on `stream` (the device's current stream must be it: *storage is allocated
  // there) into one uint8 device tensor. Baseline JPEGs the hardware decoder takes go to it in one
  // batch; the rest (progressive, unusual sampling) to nvJPEG's CUDA decoder one at a time; JPEGs
  // with other than 1 or 3 components (CMYK) are refused. Returns once the stream has decoded
  // them (a wait that yields the core).
  std::vector<NvjpegOutput> decode(const std::vector<NvjpegInput>& inputs, cudaStream_t stream,
                                   torch::Tensor* storage);

  // "the hardware JPEG decoder (N engines) and nvJPEG's CUDA decoder" or "nvJPEG's CUDA decoder
  // (no hardware decoder: REASON)", for decoder_in_use().
  const std::string& description() const { return description_; }
  int device() const { return device_; }
  // Where the batches' time went (decode() adds its phases; ImageFolder's batch adds the rest).
  DecodePhases& phases() { return phases_; }

 private:
  struct State;
  std::unique_ptr<State> acquire();
  void release(std::unique_ptr<State> state);

  int device_;
  struct Handles;
  std::unique_ptr<Handles> handles_;
  std::string description_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<State>> idle_;  // decoding states not in use
  DecodePhases phases_;
};

}  // namespace colo::data::detail
#endif
