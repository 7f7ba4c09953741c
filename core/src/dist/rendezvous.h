#pragma once

#include <colo/dist/environment.h>

#include <c10/util/intrusive_ptr.h>

#include <chrono>

namespace c10d {
class Store;
}

namespace colo::dist {

// The job's key-value store: a FileStore at env.rdzv_file, or a TCPStore served by rank 0.
// Returns once every rank has checked in; after `timeout` it throws a DistError that lists the
// ranks that never arrived.
c10::intrusive_ptr<c10d::Store> rendezvous(const Environment& env, std::chrono::milliseconds timeout);

}  // namespace colo::dist
