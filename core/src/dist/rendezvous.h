#pragma once

#include <colo/dist/environment.h>

#include <c10/util/intrusive_ptr.h>

#include <chrono>

namespace c10d {
class Store;
}

namespace colo::dist {

// The job's key-value store: a FileStore at env.rdzv_file, or a TCPStore served by rank 0 (on
// MASTER_ADDR alone where the LibTorch allows it, 2.x; on every interface with 1.13, which rank 0
// says on stderr). Returns once every rank has been admitted (admission.h: with a job token, only
// its holders are); after `timeout` it throws a DistError that lists the ranks that never were.
// With a job token the store returned is a SignedStore: every value read from it was written by
// a holder of the token.
c10::intrusive_ptr<c10d::Store> rendezvous(const Environment& env, std::chrono::milliseconds timeout);

}  // namespace colo::dist
