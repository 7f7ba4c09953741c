list(APPEND COLO_CORE_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/atomic_file.cpp
  ${CMAKE_CURRENT_LIST_DIR}/safetensors.cpp)
list(APPEND COLO_CORE_SOURCES ${CMAKE_CURRENT_LIST_DIR}/sharded_safetensors.cpp)
