#pragma once

#include <colo/dist/environment.h>

#include <chrono>

namespace c10d {
class Store;
}

namespace colo::dist {

// The ranks' check-in at the job's store, where the job token (COLO_JOB_TOKEN) is enforced.
//
// A rank joins by writing an attempt under "colo/join/<rank>/<n>" (n from a counter, so that a
// stranger's attempt under the same rank never hides the true rank's), signed with the job token
// where there is one (SignedStore::seal). Every rank then reads every attempt until each rank of
// the world has one that verifies: a rank is admitted only by proving it holds the token. An
// attempt without a valid signature is refused; rank 0 logs each refusal on stderr, with what the
// process said of itself (its pid and host: its own words, which nothing verifies). A process
// without a token that finds signed attempts learns that the job has one and fails with an error
// that says so, instead of waiting.
//
// `store` is the raw store (not a SignedStore): attempts are sealed and opened here. Returns once
// every rank is admitted; after `timeout` throws a DistError naming the ranks that never were,
// and how many attempts were refused.
void admit_ranks(c10d::Store& store, const Environment& env, std::chrono::milliseconds timeout);

}  // namespace colo::dist
