list(APPEND COLO_CORE_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/bucket_assignment.cpp
  ${CMAKE_CURRENT_LIST_DIR}/broadcast_coalesced.cpp
  ${CMAKE_CURRENT_LIST_DIR}/grad_bucket_scheduler.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bucketed_all_reduce.cpp)
