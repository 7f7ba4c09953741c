#pragma once

#include <atomic>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace colo::detail {

// One background job at a time (an asynchronous save's file writes), whose failure is never
// lost: it is rethrown by the next check, wait or start, and printed by the destructor when
// nothing asked for it (a destructor cannot throw).
class BackgroundWriter {
 public:
  BackgroundWriter() = default;
  ~BackgroundWriter();
  BackgroundWriter(const BackgroundWriter&) = delete;
  BackgroundWriter& operator=(const BackgroundWriter&) = delete;

  // Waits for the job before (rethrowing its error), then runs `job` on a new thread. The job
  // sees `cancelled` turn true when abandon() asks it to stop waiting (for other ranks' files).
  void start(std::function<void(const std::atomic<bool>& cancelled)> job);
  // Blocks until the job has finished; rethrows its error once.
  void wait();
  // Does not block: rethrows the error of a job that has finished with one.
  void check();
  // The job has finished with an error (not yet thrown). Does not block.
  bool failed() const;
  // Asks the job to stop waiting, waits for it and drops its error: another rank's failure is
  // being reported instead.
  void abandon();
  // No job is running: none was started, or it has finished (its error may wait to be thrown).
  bool finished() const;

 private:
  std::thread thread_;
  mutable std::mutex mutex_;
  bool finished_ = true;
  std::atomic<bool> cancelled_{false};
  std::exception_ptr error_;
};

}  // namespace colo::detail
