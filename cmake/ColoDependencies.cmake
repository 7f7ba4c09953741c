# Finds every dependency once, for all components. Two builds share this file:
#  - CPU: Debian's libtorch-dev 1.13 (Gloo inside libtorch_cpu), Debian's Boost/fmt/GTest/benchmark.
#  - CUDA: the PyTorch wheel's libtorch 2.x (NCCL + Gloo), found through CMAKE_PREFIX_PATH.
find_package(Threads REQUIRED)
find_package(Torch REQUIRED)
# LibTorch 2.10 and later refuse to compile below C++20; 1.13 is happy with C++17.
if(Torch_VERSION VERSION_GREATER_EQUAL 2.10)
  set(CMAKE_CXX_STANDARD 20)
endif()
find_package(Boost 1.74 REQUIRED COMPONENTS program_options)
find_package(fmt REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(ZLIB REQUIRED)
# colo::data::ImageFolder decodes JPEG with libjpeg-turbo through libjpeg's API (Debian's
# libjpeg62-turbo-dev: its partial and DCT-scaled decoding, which the TurboJPEG API of Debian 12's
# 2.1 lacks) and PNG with libpng (libpng-dev). Both are always built: CI tests them.
find_package(JPEG REQUIRED)
find_package(PNG REQUIRED)
# Debian keeps jconfig.h in the multiarch include directory, which the compiler searches by itself
# for /usr but not for a copy unpacked elsewhere (the GPU machine's /opt/colo-deps).
find_path(COLO_JPEG_CONFIG_DIR jconfig.h HINTS ${JPEG_INCLUDE_DIRS}
  PATH_SUFFIXES ${CMAKE_LIBRARY_ARCHITECTURE} NO_DEFAULT_PATH)
if(COLO_JPEG_CONFIG_DIR)
  set_property(TARGET JPEG::JPEG APPEND PROPERTY INTERFACE_INCLUDE_DIRECTORIES "${COLO_JPEG_CONFIG_DIR}")
endif()

# Does this libtorch carry CUDA (and so NCCL)? The wheel's TorchConfig exposes torch_cuda.
if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
  set(COLO_WITH_CUDA ON)
else()
  set(COLO_WITH_CUDA OFF)
endif()
message(STATUS "colo: Torch ${Torch_VERSION}, CUDA: ${COLO_WITH_CUDA}")

# Torch's imported target does not say which c10d backends were compiled in; the headers hide
# ProcessGroupGloo/NCCL behind these macros. Both builds we support have Gloo; CUDA adds NCCL.
add_library(colo_torch INTERFACE)
target_link_libraries(colo_torch INTERFACE ${TORCH_LIBRARIES})
target_compile_definitions(colo_torch INTERFACE USE_C10D_GLOO USE_DISTRIBUTED)
if(COLO_WITH_CUDA)
  target_compile_definitions(colo_torch INTERFACE USE_C10D_NCCL COLO_WITH_CUDA=1)
endif()

# PyTorch's wheel ships fmt headers (v12) ahead of the system's in its include directory: the
# header-only target avoids linking against a libfmt of another major version.
add_library(colo_fmt INTERFACE)
if(TARGET fmt::fmt-header-only)
  target_link_libraries(colo_fmt INTERFACE fmt::fmt-header-only)
else()
  target_link_libraries(colo_fmt INTERFACE fmt::fmt)
endif()

if(COLO_BUILD_TESTS)
  find_package(GTest REQUIRED)
  find_package(Python3 COMPONENTS Interpreter)
endif()
if(COLO_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()
