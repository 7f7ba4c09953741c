list(APPEND COLO_CORE_SOURCES ${CMAKE_CURRENT_LIST_DIR}/files.cpp
  ${CMAKE_CURRENT_LIST_DIR}/backward_callbacks.cpp
  ${CMAKE_CURRENT_LIST_DIR}/copy_stream.cpp)
