// colo_loader_bench: the image loader's own throughput, and the image folders it reads.
//
//   colo_loader_bench --make /tmp/folder --classes 10 --images-per-class 200   # writes JPEGs
//   colo_loader_bench --data-dir /tmp/folder --workers 1 --batches 20          # images/s per core
//
// Measures what the DataLoader over an ImageFolder delivers (read, decode, RandomResizedCrop or
// resize + centre crop, flip, normalise; batches of float [B, 3, S, S] on the CPU): images/s
// over the wall clock and per CPU-second of its worker threads (per core).
#include <colo/data/data_loader.h>
#include <colo/data/image_folder.h>
#include <fmt/format.h>
#include <torch/cuda.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "make_image_folder.h"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  std::string make_dir, data_dir, json_path, size = "500x375", decoder = "cpu";
  colo::bench::FolderSpec spec;
  int64_t batch_size = 256, workers = 1, batches = 20, image_size = 224;
  bool augment = true;
  po::options_description desc("colo_loader_bench: image folder loading throughput\nOptions");
  desc.add_options()("help,h", "this help")
      ("make", po::value(&make_dir), "write a generated image folder here (DIR/<class>/<n>.JPEG) and exit")
      ("classes", po::value(&spec.classes)->default_value(spec.classes), "--make: classes")
      ("images-per-class", po::value(&spec.images_per_class)->default_value(spec.images_per_class), "--make: images per class")
      ("size", po::value(&size)->default_value(size), "--make: WIDTHxHEIGHT of the images (every third portrait)")
      ("quality", po::value(&spec.quality)->default_value(spec.quality), "--make: JPEG quality")
      ("threads", po::value(&spec.threads)->default_value(static_cast<int>(std::thread::hardware_concurrency())),
       "--make: encoding threads")
      ("data-dir", po::value(&data_dir), "measure loading this image folder")
      ("batch-size", po::value(&batch_size)->default_value(batch_size), "images per batch")
      ("workers", po::value(&workers)->default_value(workers), "loader threads")
      ("batches", po::value(&batches)->default_value(batches), "batches timed (after one untimed)")
      ("image-size", po::value(&image_size)->default_value(image_size), "output size")
      ("augment", po::value(&augment)->default_value(augment), "1: RandomResizedCrop + flip; 0: resize + centre crop")
      ("decoder", po::value(&decoder)->default_value(decoder),
       "cpu | nvjpeg | auto: where JPEGs are decoded (nvjpeg and auto deliver the batches to GPU 0)")
      ("json", po::value(&json_path), "write the result here");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
    if (vm.count("help") || (make_dir.empty() && data_dir.empty())) {
      std::cout << desc << "\n";
      return vm.count("help") ? 0 : 2;
    }
    if (!make_dir.empty()) {
      if (std::sscanf(size.c_str(), "%ldx%ld", &spec.width, &spec.height) != 2 || spec.width < 1 || spec.height < 1) {
        throw std::invalid_argument(fmt::format("--size {}: expected WIDTHxHEIGHT, e.g. 500x375", size));
      }
      const auto start = std::chrono::steady_clock::now();
      const int64_t bytes = colo::bench::make_image_folder(make_dir, spec);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const int64_t images = spec.classes * spec.images_per_class;
      fmt::print("colo_loader_bench: wrote {} JPEGs ({}x{}, quality {}) in {} classes to {}: {:.1f} KB each, {:.1f} s\n",
                 images, spec.width, spec.height, spec.quality, spec.classes, make_dir,
                 static_cast<double>(bytes) / static_cast<double>(images) / 1024.0, seconds);
      return 0;
    }
    const auto chosen = colo::data::parse_image_decoder(decoder);
    auto folder = std::make_shared<colo::data::ImageFolder>(
        data_dir, colo::data::ImageFolderOptions(image_size).decoder(chosen));
    // The GPU decoders deliver to the GPU, where the batches go in training; the CPU decoder's
    // figure stays the host-side one it always was.
    const torch::Device device = chosen != colo::data::ImageDecoder::kCpu && torch::cuda::is_available()
                                     ? torch::Device(torch::kCUDA, 0)
                                     : torch::Device(torch::kCPU);
    colo::data::DataLoader loader(folder, colo::data::DataLoaderOptions(batch_size)
                                              .device(device)
                                              .shuffle(true)
                                              .drop_last(true)
                                              .augment(augment)
                                              .num_workers(workers)
                                              .prefetch(workers + 2));
    auto next = [&] {
      auto batch = loader.next();
      if (!batch) {
        loader.set_epoch(loader.epoch() + 1);
        batch = loader.next();
      }
      return batch;
    };
    next();  // the workers start and fill the queue
    const auto before = loader.stats();
    const auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < batches; ++i) next();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const auto after = loader.stats();
    const double images = static_cast<double>(batches * batch_size);
    const double cpu = after.worker_cpu_seconds - before.worker_cpu_seconds;
    const double made = static_cast<double>(after.images - before.images);
    const nlohmann::json record = {{"data_dir", data_dir},
                                   {"images_in_folder", folder->size()},
                                   {"batch_size", batch_size},
                                   {"workers", workers},
                                   {"decoder", decoder},
                                   {"decoder_in_use", folder->decoder_in_use(device)},
                                   {"augment", augment},
                                   {"image_size", image_size},
                                   {"images_per_s", images / seconds},
                                   {"images_per_cpu_s", made / cpu},
                                   {"worker_cpu_s", cpu},
                                   {"hardware_threads", std::thread::hardware_concurrency()},
                                   {"decode_phases", folder->gpu_decode_phases(device)}};
    fmt::print("colo_loader_bench: {} ({} images), batch {}, {} worker{}, {}, {}: {:.0f} images/s, {:.0f} images per "
               "CPU-second of the workers (per core)\n",
               data_dir, folder->size(), batch_size, workers, workers == 1 ? "" : "s", folder->decoder_in_use(device),
               augment ? "RandomResizedCrop + flip" : "resize + centre crop", images / seconds, made / cpu);
    if (const auto phases = folder->gpu_decode_phases(device); !phases.empty()) fmt::print("  GPU decoding, {}\n", phases);
    if (!json_path.empty()) std::ofstream(json_path) << record.dump(2) << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "colo_loader_bench: " << e.what() << "\n";
    return 1;
  }
}
