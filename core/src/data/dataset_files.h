// Finding and reading data set files, plain or gzip-compressed.
#pragma once

#include <cstdint>
#include <string>
#include <optional>
#include <string>
#include <vector>

namespace colo::data::detail {

// The contents of a file; gzip data (recognised by the magic bytes 1f 8b, whatever the name)
// comes back decompressed. Throws DatasetError naming the file when it cannot be read or its
// gzip data is corrupt or truncated.
std::vector<uint8_t> read_file_bytes(const std::string& path);

// path when it exists, else path with ".gz" appended when that exists, else nullopt.
std::optional<std::string> find_plain_or_gzipped(const std::string& path);

// For "cannot find" messages: the directory searched and where it came from, e.g.
// "/data/fashion-mnist (the default directory, from COLO_DATA_DIR, which does not exist)".
std::string describe_searched_directory(const std::string& directory,
                                        const std::string& default_directory);

}  // namespace colo::data::detail
