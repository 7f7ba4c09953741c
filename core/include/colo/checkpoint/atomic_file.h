#pragma once

#include <functional>
#include <iosfwd>
#include <string>
#include <string_view>

namespace colo::checkpoint {

// Replaces `path` with what `write` produces, all or nothing: the bytes go to a temporary file
// in the same directory, which is flushed to disk (fsync) and renamed over `path`; the
// directory is then fsynced so the rename itself survives a crash. A reader therefore sees
// either the old file or the complete new one, never a torn write. If `write` throws or any
// step fails, the temporary file is removed, `path` is left as it was, and the error
// propagates (I/O failures as CheckpointError naming the file and the failing step).
void atomic_write_file(const std::string& path, const std::function<void(std::ostream&)>& write);
void atomic_write_file(const std::string& path, std::string_view bytes);

// Removes `path` and fsyncs its directory, so that the removal survives a crash before anything
// written after it does. Returns false when there was no such file (nothing is synced then).
// Used to withdraw a marker of completeness before the files it vouches for are rewritten.
bool remove_file_durably(const std::string& path);

}  // namespace colo::checkpoint
