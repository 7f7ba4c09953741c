list(APPEND COLO_BOOSTER_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/async_save_plan.cpp
  ${CMAKE_CURRENT_LIST_DIR}/background_writer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/booster.cpp
  ${CMAKE_CURRENT_LIST_DIR}/deferred_writes.cpp
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint_io.cpp
  ${CMAKE_CURRENT_LIST_DIR}/closest_match.cpp
  ${CMAKE_CURRENT_LIST_DIR}/colossalai_option_names.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cross_entropy.cpp
  ${CMAKE_CURRENT_LIST_DIR}/data_parallel_recipe.cpp
  ${CMAKE_CURRENT_LIST_DIR}/memory_plan.cpp
  ${CMAKE_CURRENT_LIST_DIR}/plugin.cpp
  ${CMAKE_CURRENT_LIST_DIR}/plugin_options.cpp
  ${CMAKE_CURRENT_LIST_DIR}/plugin_registry.cpp
  ${CMAKE_CURRENT_LIST_DIR}/shared_library.cpp
  ${CMAKE_CURRENT_LIST_DIR}/precision_options.cpp
  ${CMAKE_CURRENT_LIST_DIR}/per_stage_checkpoint_io.cpp)
