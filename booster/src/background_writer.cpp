#include "background_writer.h"

#include <cstdio>
#include <exception>
#include <utility>

namespace colo::detail {

BackgroundWriter::~BackgroundWriter() {
  try {
    wait();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: an asynchronous save failed, and nothing waited for it: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "error: an asynchronous save failed, and nothing waited for it\n");
  }
}

void BackgroundWriter::start(std::function<void(const std::atomic<bool>& cancelled)> job) {
  wait();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finished_ = false;
    error_ = nullptr;
  }
  cancelled_ = false;
  thread_ = std::thread([this, job = std::move(job)] {
    std::exception_ptr error;
    try {
      job(cancelled_);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = error;
    finished_ = true;
  });
}

void BackgroundWriter::wait() {
  if (thread_.joinable()) thread_.join();
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::swap(error, error_);
  }
  if (error) std::rethrow_exception(error);
}

bool BackgroundWriter::finished() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return finished_;
}

bool BackgroundWriter::failed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return finished_ && error_;
}

void BackgroundWriter::abandon() {
  cancelled_ = true;
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  error_ = nullptr;
}

void BackgroundWriter::check() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!finished_) return;
  }
  wait();
}

}  // namespace colo::detail
