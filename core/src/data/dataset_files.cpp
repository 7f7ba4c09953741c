#include "dataset_files.h"

#include <colo/compat/files.h>

#include <colo/data/dataset_error.h>
#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace colo::data::detail {
namespace {

bool is_gzip(const std::vector<uint8_t>& bytes, size_t offset = 0) {
  return bytes.size() >= offset + 2 && bytes[offset] == 0x1f && bytes[offset + 1] == 0x8b;
}

// zlib counts in uInt: feed and drain it in pieces of at most 1 GiB.
constexpr size_t kMaxChunk = size_t{1} << 30;

std::vector<uint8_t> gunzip(const std::vector<uint8_t>& compressed, const std::string& path) {
  z_stream stream{};
  // 16 + MAX_WBITS: expect a gzip header and trailer (the CRC-32 and length are checked).
  if (inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK) {
    throw DatasetError(fmt::format("{}: cannot start gzip decompression (zlib: out of memory)", path));
  }
  struct InflateEnd {
    z_stream* stream;
    ~InflateEnd() { inflateEnd(stream); }
  } inflate_end{&stream};

  auto* const begin = const_cast<Bytef*>(compressed.data());
  const size_t total = compressed.size();
  auto consumed = [&] { return static_cast<size_t>(stream.next_in - begin); };
  auto refill = [&] { stream.avail_in = static_cast<uInt>(std::min(total - consumed(), kMaxChunk)); };

  // The trailer's last four bytes hold the uncompressed size modulo 2^32: a good first guess.
  size_t guess = 0;
  if (total >= 4) {
    guess = size_t{compressed[total - 4]} | size_t{compressed[total - 3]} << 8 | size_t{compressed[total - 2]} << 16 |
            size_t{compressed[total - 1]} << 24;
  }
  std::vector<uint8_t> out(std::max<size_t>(guess, 1 << 16));
  size_t produced = 0;
  stream.next_in = begin;
  refill();
  for (;;) {
    if (produced == out.size()) out.resize(out.size() * 2);
    stream.next_out = out.data() + produced;
    stream.avail_out = static_cast<uInt>(std::min(out.size() - produced, kMaxChunk));
    if (stream.avail_in == 0) refill();
    const int status = inflate(&stream, Z_NO_FLUSH);
    produced = static_cast<size_t>(stream.next_out - out.data());
    if (status == Z_OK) continue;
    if (status == Z_STREAM_END) {
      // gzip allows several members back to back (e.g. from `cat a.gz b.gz`); anything else
      // after the first member is padding that gzip(1) ignores too.
      if (is_gzip(compressed, consumed())) {
        inflateReset(&stream);
        refill();
        continue;
      }
      break;
    }
    if (status == Z_BUF_ERROR && consumed() == total) {
      throw DatasetError(
          fmt::format("{}: truncated gzip file: the compressed data ends after {} bytes without the end of the stream "
                      "(an interrupted download or copy?); fetch or reinstall the file",
                      path, total));
    }
    throw DatasetError(fmt::format("{}: corrupt gzip data ({}); fetch or reinstall the file", path,
                                   stream.msg ? stream.msg : "zlib error " + std::to_string(status)));
  }
  out.resize(produced);
  return out;
}

}  // namespace

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  if (!file) {
    throw DatasetError(fmt::format("{}: cannot open the file ({})", path, std::strerror(errno)));
  }
  const auto size = static_cast<size_t>(file.tellg());
  std::vector<uint8_t> bytes(size);
  file.seekg(0);
  if (!file.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size))) {
    throw DatasetError(fmt::format("{}: reading {} bytes failed", path, size));
  }
  return is_gzip(bytes) ? gunzip(bytes, path) : bytes;
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
  const char* data_dir = std::getenv("COLO_DATA_DIR");
  const char* origin = directory != default_directory               ? "the directory given"
                       : (data_dir != nullptr && *data_dir != '\0') ? "the default directory, from COLO_DATA_DIR"
                                                                    : "the default directory";
  return fmt::format("{} ({}{})", directory, origin, exists ? "" : ", which does not exist");
}

}  // namespace colo::data::detail
