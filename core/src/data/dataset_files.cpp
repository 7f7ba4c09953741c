#include "dataset_files.h"

#include <colo/files/files.h>

#include <colo/data/dataset_error.h>
#include <colo/env/variables.h>
#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace colo::data::detail {
namespace {

// gzread counts in unsigned int and returns int: read in pieces of at most 1 GiB.
constexpr size_t kMaxChunk = size_t{1} << 30;

}  // namespace

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  // zlib's gzip file functions do what a data set file needs: gzip is recognised by its magic
  // bytes, whatever the name; several members back to back (`cat a.gz b.gz`) are read as one
  // stream, and anything after the last member is ignored, as gzip(1) does; a file that is not
  // gzip is read as it is.
  errno = 0;
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    throw DatasetError(fmt::format("{}: cannot open the file ({})", path,
                                   errno != 0 ? std::strerror(errno) : "zlib: out of memory"));
  }
  struct Close {
    gzFile file;
    ~Close() { gzclose(file); }
  } close{file};
  gzbuffer(file, 1 << 17);  // zlib's 8 KiB default costs a system call per 8 KiB

  // The file's size is the whole story for a plain file and a first guess for a gzip one.
  const size_t on_disk = files::file_size(path);
  std::vector<uint8_t> out(std::max<size_t>(on_disk + 1, 1 << 16));
  size_t produced = 0;
  bool failed = false;
  for (;;) {
    if (produced == out.size()) out.resize(out.size() * 2);
    const auto wanted = static_cast<unsigned>(std::min(out.size() - produced, kMaxChunk));
    const int got = gzread(file, out.data() + produced, wanted);
    if (got < 0) {
      failed = true;
      break;
    }
    produced += static_cast<size_t>(got);
    if (got == 0) break;
  }
  int status = Z_OK;
  const char* message = gzerror(file, &status);
  if (status == Z_BUF_ERROR) {
    // The input ended inside a gzip member (zlib's "unexpected end of file").
    throw DatasetError(
        fmt::format("{}: truncated gzip file: the compressed data ends after {} bytes without the end of the stream "
                    "(an interrupted download or copy?); fetch or reinstall the file",
                    path, on_disk));
  }
  if (status == Z_ERRNO) {
    throw DatasetError(fmt::format("{}: reading {} bytes failed ({})", path, on_disk, std::strerror(errno)));
  }
  if (status == Z_MEM_ERROR) {
    throw DatasetError(fmt::format("{}: cannot decompress the gzip data (zlib: out of memory)", path));
  }
  if (status != Z_OK || failed) {
    const std::string what = message != nullptr && *message != '\0' ? std::string(message)
                                                                     : "zlib error " + std::to_string(status);
    throw DatasetError(fmt::format("{}: corrupt gzip data ({}); fetch or reinstall the file", path, what));
  }
  out.resize(produced);
  return out;
}

std::optional<std::string> find_plain_or_gzipped(const std::string& path) {
  if (files::is_regular_file(path)) return path;
  const std::string gzipped = path + ".gz";
  if (files::is_regular_file(gzipped)) return gzipped;
  return std::nullopt;
}

std::string describe_searched_directory(const std::string& directory,
                                        const std::string& default_directory) {
  const bool exists = files::is_directory(directory);
  const char* origin = directory != default_directory      ? "the directory given"
                       : env::text("COLO_DATA_DIR").has_value() ? "the default directory, from COLO_DATA_DIR"
                                                                : "the default directory";
  return fmt::format("{} ({}{})", directory, origin, exists ? "" : ", which does not exist");
}

}  // namespace colo::data::detail
