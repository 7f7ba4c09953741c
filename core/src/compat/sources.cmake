# The LibTorch-dependent parts of compat (files.cpp is colo_files, built without LibTorch: see
# core/CMakeLists.txt).
list(APPEND COLO_CORE_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/backward_callbacks.cpp
  ${CMAKE_CURRENT_LIST_DIR}/copy_stream.cpp)
