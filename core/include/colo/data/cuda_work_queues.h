#pragma once

// The hardware work queues nvJPEG needs (issue 38). nvJPEG's hardware decoder spreads a batch over
// its own internal streams (about thirty for two loader threads on an H200), and CUDA maps every
// stream of a context onto CUDA_DEVICE_MAX_CONNECTIONS hardware queues: 8 unless the variable says
// otherwise. An internal stream that shares a queue with the training stream runs only after every
// training kernel queued ahead of it, so the decoding thread stalls for up to a whole step
// (ViT-B/16 bf16 batch 256 from JPEGs on an H200: 0.914 of synthetic data with 8 queues, 0.983
// with 32). The driver reads the variable when it initialises (cuInit: the process's first CUDA
// call of any kind, counting the devices included), so it must be set before that:
// widen_work_queues_for_nvjpeg() does so where it still can, and ImageFolder::decoder_in_use() says
// when it came too late.
#include <optional>
#include <string>

namespace colo::data {

// The queues colo asks for when nvJPEG decodes.
constexpr int kNvjpegWorkQueues = 32;
// CUDA's number when CUDA_DEVICE_MAX_CONNECTIONS is unset.
constexpr int kDefaultWorkQueues = 8;

struct WorkQueuesPlan {
  int queues = kDefaultWorkQueues;  // what the context has, or will have
  bool set_variable = false;        // CUDA_DEVICE_MAX_CONNECTIONS should be set to kNvjpegWorkQueues now
  std::string advice;               // non-empty: nvJPEG will stall, and what to change
};

// The plan for a process whose CUDA_DEVICE_MAX_CONNECTIONS is `variable` (nullopt when unset or
// empty) and whose CUDA driver is (`cuda_initialised`) or is not yet initialised. A value the user
// set is never overridden, only advised against when it is below kNvjpegWorkQueues.
WorkQueuesPlan plan_work_queues(const std::optional<std::string>& variable, bool cuda_initialised);

// Carries out plan_work_queues for this process in builds with nvJPEG (sets the variable when it
// is unset and CUDA is not initialised yet; it asks the driver without initialising it) and
// returns the plan; elsewhere returns a plan with no advice and changes nothing. Programs that may
// decode with nvJPEG call it before their first CUDA call; ImageFolder calls it when built with
// decoder nvjpeg or auto.
WorkQueuesPlan widen_work_queues_for_nvjpeg();

// The plan as it stands, changing nothing: for the decoder's description.
WorkQueuesPlan current_work_queues();

}  // namespace colo::data
