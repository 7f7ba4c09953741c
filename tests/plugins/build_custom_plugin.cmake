# cmake -P script (see CMakeLists.txt): installs the colo build tree COLO_BINARY_DIR into
# WORK_DIR/prefix, then configures and builds the out-of-tree plugin SOURCE_DIR against it in
# WORK_DIR/build, as a third party would.
foreach(var COLO_BINARY_DIR SOURCE_DIR WORK_DIR GENERATOR)
  if(NOT ${var})
    message(FATAL_ERROR "build_custom_plugin.cmake needs -D${var}=...")
  endif()
endforeach()

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " command "${ARGN}")
    message(FATAL_ERROR "failed (${rc}): ${command}")
  endif()
endfunction()

string(REPLACE "|" ";" PREFIX_PATH "${PREFIX_PATH}")  # a list, passed '|'-separated
file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
run(${CMAKE_COMMAND} --install "${COLO_BINARY_DIR}" --prefix "${prefix}")

# Only the installed colo and colo's own dependencies (LibTorch, Boost, fmt) may be visible.
set(configure_args -S "${SOURCE_DIR}" -B "${WORK_DIR}/build" -G "${GENERATOR}" -DCMAKE_BUILD_TYPE=Release
  "-DCMAKE_PREFIX_PATH=${prefix};${PREFIX_PATH}")
if(Torch_DIR)
  list(APPEND configure_args "-DTorch_DIR=${Torch_DIR}")
endif()
if(CXX_COMPILER)
  list(APPEND configure_args "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
endif()
if(CUDA_COMPILER)
  list(APPEND configure_args "-DCMAKE_CUDA_COMPILER=${CUDA_COMPILER}")
endif()
run(${CMAKE_COMMAND} ${configure_args})
run(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
if(NOT EXISTS "${WORK_DIR}/build/libcolo_plugin_single_device.so")
  message(FATAL_ERROR "the build did not produce ${WORK_DIR}/build/libcolo_plugin_single_device.so")
endif()
