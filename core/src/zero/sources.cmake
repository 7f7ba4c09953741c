list(APPEND COLO_CORE_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/allocate.cpp
  ${CMAKE_CURRENT_LIST_DIR}/pinned_staging.cpp
  ${CMAKE_CURRENT_LIST_DIR}/chunk_plan.cpp
  ${CMAKE_CURRENT_LIST_DIR}/chunked_parameters.cpp
  ${CMAKE_CURRENT_LIST_DIR}/device_memory.cpp
  ${CMAKE_CURRENT_LIST_DIR}/shard_layout.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sharded_adam.cpp
  ${CMAKE_CURRENT_LIST_DIR}/all_reduce_grad_reducer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/reduce_scatter_grad_reducer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bucketed_all_gather.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gather_full_tensors.cpp)
