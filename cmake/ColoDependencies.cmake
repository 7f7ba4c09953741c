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

# Gloo's headers, which ProcessGroupGloo.hpp includes. Debian's libtorch-dev comes with them
# (libgloo-dev, in /usr/include: found there by every compile, nothing to add). PyTorch's wheel
# ships none, so the CUDA build has a Gloo backend (COLO_BACKEND=gloo: several ranks on one GPU,
# tests/gpu/README.md) only where they are given: COLO_GLOO_INCLUDE_DIR, or a prefix of
# CMAKE_PREFIX_PATH (the GPU machine's /opt/colo-deps, where Debian's libgloo-dev from .gpu-deps
# is unpacked). Headers of another gloo version than the one built into LibTorch are used only if
# ProcessGroupGloo.hpp compiles with them (colo calls LibTorch's exported code; the headers only
# declare it). COLO_HAS_GLOO then tells every target alike (colo/compat/torch_compat.h), also when
# the directory is reachable through another package's include path.
find_path(COLO_GLOO_INCLUDE_DIR gloo/algorithm.h DOC "directory holding gloo/algorithm.h (Gloo's headers)")
if(COLO_GLOO_INCLUDE_DIR AND NOT COLO_GLOO_INCLUDE_DIR IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
  include(CheckCXXSourceCompiles)
  set(CMAKE_REQUIRED_INCLUDES ${TORCH_INCLUDE_DIRS} ${COLO_GLOO_INCLUDE_DIR})
  set(CMAKE_REQUIRED_DEFINITIONS -DUSE_C10D_GLOO -DUSE_DISTRIBUTED)
  set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)
  check_cxx_source_compiles([[
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
c10::intrusive_ptr<c10d::ProcessGroupGloo> colo_gloo_probe(const c10::intrusive_ptr<c10d::Store>& store) {
  auto options = c10d::ProcessGroupGloo::Options::create(std::chrono::milliseconds(1000));
  options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, 0, 1, options);
}]] COLO_GLOO_HEADERS_COMPILE)
  unset(CMAKE_REQUIRED_INCLUDES)
  unset(CMAKE_REQUIRED_DEFINITIONS)
  unset(CMAKE_TRY_COMPILE_TARGET_TYPE)
  if(COLO_GLOO_HEADERS_COMPILE)
    target_include_directories(colo_torch SYSTEM INTERFACE "${COLO_GLOO_INCLUDE_DIR}")
    target_compile_definitions(colo_torch INTERFACE COLO_HAS_GLOO=1)
    message(STATUS "colo: Gloo backend: yes (headers from ${COLO_GLOO_INCLUDE_DIR})")
  else()
    target_compile_definitions(colo_torch INTERFACE COLO_HAS_GLOO=0)
    message(STATUS "colo: Gloo backend: no (the headers in ${COLO_GLOO_INCLUDE_DIR} do not compile with this "
      "LibTorch's ProcessGroupGloo.hpp; COLO_BACKEND=gloo is refused)")
  endif()
elseif(COLO_GLOO_INCLUDE_DIR)
  message(STATUS "colo: Gloo backend: yes (headers in ${COLO_GLOO_INCLUDE_DIR})")
else()
  message(STATUS "colo: Gloo backend: no (no gloo/algorithm.h; COLO_BACKEND=gloo is refused)")
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
