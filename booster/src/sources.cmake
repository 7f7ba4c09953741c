list(APPEND COLO_BOOSTER_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/booster.cpp
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint_io.cpp
  ${CMAKE_CURRENT_LIST_DIR}/closest_match.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gemini_optimizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/mixed_precision_optimizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/optimizer_scalars.cpp
  ${CMAKE_CURRENT_LIST_DIR}/optimizer_state_entries.cpp
  ${CMAKE_CURRENT_LIST_DIR}/model_wrapper.cpp
  ${CMAKE_CURRENT_LIST_DIR}/optimizer_wrapper.cpp
  ${CMAKE_CURRENT_LIST_DIR}/parallelize.cpp
  ${CMAKE_CURRENT_LIST_DIR}/plugin.cpp
  ${CMAKE_CURRENT_LIST_DIR}/plugin_options.cpp
  ${CMAKE_CURRENT_LIST_DIR}/plugin_registry.cpp
  ${CMAKE_CURRENT_LIST_DIR}/precision_options.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sharded_adam_state.cpp
  ${CMAKE_CURRENT_LIST_DIR}/staged_checkpoint_io.cpp
  ${CMAKE_CURRENT_LIST_DIR}/zero_optimizer.cpp)
