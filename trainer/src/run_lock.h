// The lock that keeps two runs from saving into one state directory (StateDirectory's).
#pragma once

#include <stdexcept>
#include <string>

namespace colo::detail {

// Another process holds the lock; what() is what it wrote into the lock file (who it is).
class RunLockBusy : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An exclusive lock on the file `path` (created when missing), held while the object lives. It is
// an open-file-description lock (Linux's F_OFD_SETLK; flock where that is missing), so the kernel
// releases it when the process ends, however it ends, and a second lock in the same process
// conflicts as one in another process does. The holder writes who it is into the file (this
// process's id, host, start time and command line): what a second run's error shows. The file
// stays when the lock is released: removing it would let two runs lock two different files.
class RunLock {
 public:
  // Throws RunLockBusy when another open file holds the lock, std::runtime_error naming the path
  // and the system's reason when the file cannot be created, opened or locked.
  explicit RunLock(const std::string& path);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  int fd_ = -1;
};

// "pid 1234 on host h, started 2026-11-24 10:31:02 UTC: train_vit --save ckpt": who this process is.
std::string describe_this_process();

}  // namespace colo::detail
