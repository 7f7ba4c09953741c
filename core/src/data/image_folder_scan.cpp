#include "image_folder_scan.h"

#include <colo/files/files.h>
#include <colo/data/dataset_error.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <utility>

namespace colo::data::detail {
namespace {

bool hidden(const std::string& name) { return !name.empty() && name[0] == '.'; }

// torchvision walks each class with os.walk(followlinks=True) and sorts the (directory, files)
// pairs by directory path, then each directory's file names: byte order, as here.
void walk(const std::string& directory, std::vector<std::pair<std::string, std::vector<std::string>>>& found,
          int64_t& ignored, int depth) {
  std::vector<std::string> images;
  for (const auto& name : files::list_directory(directory)) {
    if (hidden(name)) continue;
    const std::string path = files::join(directory, name);
    if (files::is_directory(path)) {
      // Symbolic links are followed, as torchvision does; a cycle stops at a depth no data set has.
      if (depth < 64) walk(path, found, ignored, depth + 1);
    } else if (has_image_extension(name)) {
      images.push_back(name);
    } else {
      ++ignored;
    }
  }
  found.emplace_back(directory, std::move(images));
}

}  // namespace

bool has_image_extension(const std::string& name) {
  const auto dot = name.rfind('.');
  if (dot == std::string::npos) return false;
  std::string extension = name.substr(dot + 1);
  std::transform(extension.begin(), extension.end(), extension.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return extension == "jpg" || extension == "jpeg" || extension == "png";
}

ImageFolderListing scan_image_folder(const std::string& root) {
  if (!files::is_directory(root)) {
    throw DatasetError(fmt::format("{}: no such directory; an image folder holds one sub-directory of images per class",
                                   root));
  }
  ImageFolderListing listing;
  for (const auto& name : files::list_directory(root)) {
    if (!hidden(name) && files::is_directory(files::join(root, name))) listing.classes.push_back(name);
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
    walk(files::join(root, listing.classes[label]), found, listing.ignored_files, 0);
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
