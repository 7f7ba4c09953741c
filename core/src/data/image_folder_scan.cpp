#include "image_folder_scan.h"

#include <colo/files/files.h>
#include <colo/data/dataset_error.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <utility>

namespace colo::data::detail {
namespace {

bool hidden(const std::string& name) { return !name.empty() && name[0] == '.'; }

// A directory's identity, whatever path leads to it.
struct DirectoryId {
  dev_t device;
  ino_t inode;
  bool operator==(const DirectoryId& other) const { return device == other.device && inode == other.inode; }
};

std::string link_target(const std::string& path) {
  char target[4096];
  const ssize_t n = ::readlink(path.c_str(), target, sizeof target - 1);
  return n < 0 ? std::string("?") : std::string(target, static_cast<size_t>(n));
}

class Walk {
 public:
  // The walk is inside `root` from the start: a link back to it is a cycle too.
  Walk(const std::string& root, ImageFolderListing& listing, bool skip_broken_links)
      : listing_(listing), skip_(skip_broken_links) {
    struct stat info {};
    if (::stat(root.c_str(), &info) == 0) {
      inside_.push_back({info.st_dev, info.st_ino});
      inside_paths_.push_back(root);
    }
  }

  // Follows `path` into `found` (directory, its image names), torchvision's os.walk(followlinks=True)
  // without its endless descent into cycles.
  void directory(const std::string& path, std::vector<std::pair<std::string, std::vector<std::string>>>& found) {
    struct stat info {};
    if (::stat(path.c_str(), &info) != 0) return;  // the caller checked it
    const DirectoryId id{info.st_dev, info.st_ino};
    const auto ancestor = std::find(inside_.begin(), inside_.end(), id);
    if (ancestor != inside_.end()) {
      listing_.notes.push_back(fmt::format(
          "{} (a link to {}): leads back to {}, a directory the walk is already in (a cycle): not followed, so each "
          "image is listed once",
          path, link_target(path), inside_paths_[static_cast<size_t>(ancestor - inside_.begin())]));
      return;
    }
    inside_.push_back(id);
    inside_paths_.push_back(path);
    std::vector<std::string> images;
    for (const auto& name : files::list_directory(path)) {
      if (hidden(name)) continue;
      const std::string entry = files::join(path, name);
      if (!reachable(entry)) continue;
      if (files::is_directory(entry)) {
        directory(entry, found);
      } else if (has_image_extension(name)) {
        images.push_back(name);
      } else {
        ++listing_.ignored_files;
      }
    }
    inside_.pop_back();
    inside_paths_.pop_back();
    found.emplace_back(path, std::move(images));
  }

  // False for a symbolic link that leads nowhere, reported (or refused).
  bool reachable(const std::string& entry) {
    struct stat info {};
    if (::stat(entry.c_str(), &info) == 0) return true;
    const int error = errno;
    if (::lstat(entry.c_str(), &info) != 0 || !S_ISLNK(info.st_mode)) return true;  // reading it will say
    const std::string what =
        fmt::format("{}: a symbolic link to {} that {}", entry, link_target(entry),
                    error == ELOOP ? "loops (a chain of links that comes back to itself)" : "leads nowhere (dangling)");
    if (!skip_) {
      throw DatasetError(fmt::format("{}; remove or repair the link (or skip such links with skip_unreadable)", what));
    }
    listing_.notes.push_back(what + ": skipped");
    return false;
  }

 private:
  ImageFolderListing& listing_;
  bool skip_;
  std::vector<DirectoryId> inside_;        // the directories from the root down to here
  std::vector<std::string> inside_paths_;  // and their paths
};

}  // namespace

bool has_image_extension(const std::string& name) {
  const auto dot = name.rfind('.');
  if (dot == std::string::npos) return false;
  std::string extension = name.substr(dot + 1);
  std::transform(extension.begin(), extension.end(), extension.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return extension == "jpg" || extension == "jpeg" || extension == "png";
}

ImageFolderListing scan_image_folder(const std::string& root, bool skip_broken_links) {
  if (!files::is_directory(root)) {
    throw DatasetError(fmt::format("{}: no such directory; an image folder holds one sub-directory of images per class",
                                   root));
  }
  ImageFolderListing listing;
  Walk walk(root, listing, skip_broken_links);
  for (const auto& name : files::list_directory(root)) {
    const std::string path = files::join(root, name);
    if (!hidden(name) && walk.reachable(path) && files::is_directory(path)) listing.classes.push_back(name);
  }
  if (listing.classes.empty()) {
    throw DatasetError(fmt::format(
        "{}: no class directories; an image folder holds one sub-directory per class (root/cat/1.jpg, "
        "root/dog/2.png, ...)",
        root));
  }
  std::vector<std::string> empty;
  for (size_t label = 0; label < listing.classes.size(); ++label) {
    std::vector<std::pair<std::string, std::vector<std::string>>> found;
    walk.directory(files::join(root, listing.classes[label]), found);
    std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    const size_t before = listing.paths.size();
    for (const auto& [directory, names] : found) {
      for (const auto& name : names) {
        listing.paths.push_back(files::join(directory, name));
        listing.labels.push_back(static_cast<int64_t>(label));
      }
    }
    if (listing.paths.size() == before) empty.push_back(listing.classes[label]);
  }
  if (!empty.empty()) {
    const size_t shown = std::min<size_t>(empty.size(), 5);
    throw DatasetError(fmt::format(
        "{}: {} of {} class directories hold no .jpg, .jpeg or .png file: {}{}; add images or remove the directories",
        root, empty.size(), listing.classes.size(), fmt::join(empty.begin(), empty.begin() + static_cast<long>(shown), ", "),
        empty.size() > shown ? ", ..." : ""));
  }
  return listing;
}

}  // namespace colo::data::detail
