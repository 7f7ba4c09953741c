// Finding an image folder's classes and files (torchvision's ImageFolder.make_dataset order).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace colo::data::detail {

struct ImageFolderListing {
  std::vector<std::string> classes;               // sorted directory names
  std::vector<std::string> paths;                 // every image, class by class
  std::vector<int64_t> labels;                    // index into classes, per path
  int64_t ignored_files = 0;                      // files of other types
  std::vector<std::string> notes;                 // what the walk skipped, and why
};

// Throws DatasetError naming root when it is not a directory, has no class directory, or when a
// class has no image (naming those classes). Symbolic links are followed, as torchvision does,
// except into a directory the walk is already inside (a cycle: its contents are listed once, and
// the link goes into `notes`). A link that leads nowhere (dangling, or a loop of links) is a
// DatasetError naming it, or with `skip_broken_links` a line in `notes`.
ImageFolderListing scan_image_folder(const std::string& root, bool skip_broken_links = false);

// Whether a file name ends in .jpg, .jpeg or .png, in any case.
bool has_image_extension(const std::string& name);

}  // namespace colo::data::detail
