#pragma once

#include <string>

#include "launcher.h"

// The job token (COLO_JOB_TOKEN) on colo-run's side: made on node 0 when not given, required
// from the environment on every other node, handed to every rank. colo-run itself checks nothing
// with it (it links no LibTorch): the ranks sign and check what they write into the job's store
// (colo's core/src/dist/admission.h and signed_store.h).
namespace colo::launcher {

// 64 hexadecimal digits from the kernel's random source (getrandom).
std::string new_job_token();

// COLO_JOB_TOKEN from colo-run's environment when set (throws UsageError when malformed); else a
// new one on node 0, which it says on stderr when other nodes need it; else (node > 0) a
// UsageError that says where the token comes from.
std::string resolve_job_token(const LaunchConfig& config);

// The token of the job's attempt `restart_count` (--max-restarts): the job's own for the first
// (0), else HMAC-SHA256(job token, "colo-run restart K") in hexadecimal. Each attempt's ranks sign
// with their attempt's token, so a rank left over from an earlier attempt is not admitted into a
// later one; any node can derive it from the job's token alone.
std::string restart_job_token(const std::string& job_token, int restart_count);

}  // namespace colo::launcher
