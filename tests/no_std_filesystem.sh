#!/bin/sh
# Fails when one of the given binaries calls into std::filesystem. PyTorch's wheel (the CUDA
# build's LibTorch) exports its own copy of std::filesystem without symbol versions, and a call
# that binds to it instead of libstdc++'s can crash (colo/files/files.h): colo uses colo::files,
# and loads plugins with dlopen rather than through Boost.DLL's std::filesystem paths.
status=0
for binary in "$@"; do
  found=$(nm -D --undefined-only -C "$binary" | grep 'std::\(__cxx11::\|experimental::\)\?filesystem::')
  if [ -n "$found" ]; then
    echo "$binary calls std::filesystem:"
    echo "$found"
    status=1
  fi
done
[ $status -eq 0 ] && echo "no std::filesystem calls in $# binaries"
exit $status
