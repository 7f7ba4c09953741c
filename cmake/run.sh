#!/usr/bin/env bash
# colo's set-up and entry points, used by the README's two commands and by .ci/run.
#   bash cmake/run.sh main         install what is missing, build, train a ViT on Fashion-MNIST
#   bash cmake/run.sh test         install what is missing, build, run every test
#   bash cmake/run.sh cuda-compile compile the CUDA build against PyTorch's wheel (CI; no GPU needed)
# Every install step is idempotent: it checks first and installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
shift || true
jobs=${COLO_JOBS:-2}
build=${COLO_BUILD_DIR:-build}

sudo_if_needed() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# Debian packages for the CPU build (LibTorch 1.13 with Gloo, OpenBLAS: without it LibTorch
# uses the reference BLAS, ~30x slower), the dataset, and the build tools; libjpeg-turbo and
# libpng decode ImageFolder's images, PLplot (with its cairo PNG driver) draws colo-plot's charts,
# protobuf (library and compiler) writes TensorBoardHook's event files.
apt_packages=(build-essential cmake ninja-build pkg-config libtorch-dev libgloo-dev libopenblas0-pthread
  libboost-dev libboost-program-options-dev libfmt-dev nlohmann-json3-dev zlib1g-dev libgtest-dev
  libbenchmark-dev dataset-fashion-mnist python3 libjpeg62-turbo-dev libpng-dev libplplot-dev plplot-driver-cairo
  libprotobuf-dev protobuf-compiler)

install_apt() {
  local missing=()
  for p in "${apt_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "colo: installing Debian packages: ${missing[*]}"
    sudo_if_needed apt-get update -qq
    sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
}

# Test oracles only (colo never imports Python): PyTorch, timm, Hugging Face transformers,
# safetensors and TensorBoard (which reads TensorBoardHook's files back) from PyPI, at pinned
# versions: a new release could change a reference (timm's init or resampling, transformers' ViT)
# under an unchanged test. Raise a pin on purpose, with the tests. The same torch wheel's libtorch
# is what the CI-only CUDA compile check builds against.
oracle_pins=(torch==2.15.0 timm==1.0.31 safetensors==0.8.0 transformers==5.24.0 tensorboard==2.21.0)
install_oracles() {
  if ! python3 -c 'import importlib.metadata as m, sys
sys.exit(any(m.version(n) != v for n, v in (pin.split("==") for pin in sys.argv[1:])))' "${oracle_pins[@]}" 2>/dev/null; then
    echo "colo: installing the Python test oracles (${oracle_pins[*]}) from PyPI"
    python3 -m pip install --quiet "${oracle_pins[@]}" 2>/dev/null ||
      python3 -m pip install --quiet --break-system-packages "${oracle_pins[@]}"
  fi
}

# A compiler cache where one is installed (development machines; CI starts fresh and gains nothing):
# several checkouts of the tree (git worktrees) share hits because paths are taken relative to
# CCACHE_BASEDIR; the precompiled header needs ccache's pch sloppiness and -fpch-preprocess.
launcher=()
if command -v ccache >/dev/null && [ "${COLO_CCACHE:-1}" != 0 ]; then
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(cd .. && pwd)}
  export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi

# A unity build (8 sources per translation unit; the unit tests opt out): a whole build in about
# half the CPU time, which is what CI and a first build do. COLO_UNITY=OFF compiles sources one by
# one, so that an edit recompiles one file (development with ccache). A unity build could hide a
# missing #include that a neighbouring source provides; the file-by-file builds would not.
unity=${COLO_UNITY:-ON}

configure_and_build() {
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLO_WERROR=${COLO_WERROR:-OFF} "${launcher[@]}" \
    -DCMAKE_UNITY_BUILD="$unity" -DCMAKE_UNITY_BUILD_BATCH_SIZE=8 "$@" >/dev/null
  cmake --build "$build" -j "$jobs"
}

case "$mode" in
  main)
    install_apt
    configure_and_build -DCOLO_BUILD_TESTS=OFF -DCOLO_BUILD_EXAMPLES=ON -DCOLO_BUILD_BENCHMARKS=OFF
    # Two ranks of torch_ddp: on the first two GPUs where there are GPUs, else on CPU threads.
    exec "$build/bin/colo-run" --nproc-per-node 2 "$build/bin/train_vit" --plugin torch_ddp "$@"
    ;;
  test)
    t0=$(date +%s)
    install_apt
    install_oracles
    echo "colo: installs took $(( $(date +%s) - t0 )) s"
    # Explicit: a build tree configured by `main` (tests off) must not stay that way.
    t0=$(date +%s)
    configure_and_build -DCOLO_BUILD_TESTS=ON -DCOLO_BUILD_EXAMPLES=ON -DCOLO_BUILD_BENCHMARKS=ON
    echo "colo: the build took $(( $(date +%s) - t0 )) s"
    cd "$build"
    ctest --output-on-failure -j 1 --timeout 900 "$@"
    ;;
  cuda-compile)
    install_apt
    install_oracles
    # nvJPEG's header and library (ImageFolder's decoder nvjpeg, issue 38), which this machine's CUDA
    # toolkit lacks: PyPI's wheel, pinned, lands beside the torch wheel's nvidia/ libraries, where
    # core/CMakeLists.txt looks, so that CI compiles and links the nvJPEG code too (3.8 MB).
    nvjpeg_pin=13.3.2.43
    if ! python3 -c 'import importlib.metadata as m, sys; sys.exit(m.version("nvidia-nvjpeg") != sys.argv[1])' "$nvjpeg_pin" 2>/dev/null; then
      echo "colo: installing nvidia-nvjpeg==$nvjpeg_pin from PyPI (nvJPEG for the CUDA compile)"
      python3 -m pip install --quiet --no-deps "nvidia-nvjpeg==$nvjpeg_pin" 2>/dev/null ||
        python3 -m pip install --quiet --no-deps --break-system-packages "nvidia-nvjpeg==$nvjpeg_pin"
    fi
    torch_root=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')
    # The wheel's libtorch_cuda needs the NCCL/CUDA libraries of PyPI's nvidia-* packages, which
    # are newer than the toolkit's copies in the system paths: point the linker at them.
    nvidia_libs=$(python3 -c 'import glob, os, torch; print(":".join(glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)), "nvidia", "*", "lib"))))')
    link_flags="-Wl,-rpath-link,$nvidia_libs"
    # The torch root comes first so that its lib/ wins over Debian's libtorch in /usr/lib; TorchConfig
    # looks for libc10 by name, which can find Debian's copy, so it is named explicitly.
    # The unit tests are left out: they are the same code in both builds, are compiled (against
    # LibTorch 1.13) by the test command and (against 2.x) by every GPU-machine build, and take ~3 of
    # CI's 35 minutes here. Everything with CUDA- or NCCL-only code is compiled.
    # A unity build (16 sources per translation unit; the unit tests are left out, see above): fewer
    # translation units parse and instantiate LibTorch 2.x's heavy templates fewer times (colo_core:
    # 7 units in 502 CPU-seconds instead of 14 in 695 with 8 sources each). It could hide a missing
    # #include that a neighbouring source provides; the GPU machine's build, file by file, would not.
    # TensorBoard off, as on the GPU machine (its image has no protobuf): linked against the wheel's
    # LibTorch, the generated messages found no protobuf library to resolve them.
    TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} \
      cmake -S . -B "${COLO_CUDA_BUILD_DIR:-build-cuda}" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLO_BUILD_UNIT_TESTS=OFF -DCOLO_TENSORBOARD=OFF "${launcher[@]}" \
      -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=16 \
      -DCMAKE_PREFIX_PATH="$torch_root;$torch_root/share/cmake" -DCMAKE_EXE_LINKER_FLAGS="$link_flags" \
      -Dc10_LIBRARY="$torch_root/lib/libc10.so" \
      -DCMAKE_SHARED_LINKER_FLAGS="$link_flags" -DCMAKE_MODULE_LINKER_FLAGS="$link_flags" >/dev/null
    cmake --build "${COLO_CUDA_BUILD_DIR:-build-cuda}" -j "$jobs"
    echo "colo: the CUDA build compiled against PyTorch $(python3 -c 'import torch; print(torch.__version__)')"
    ;;
  *)
    echo "usage: bash cmake/run.sh main|test|cuda-compile [args...]" >&2
    exit 2
    ;;
esac
