list(APPEND COLO_ENGINE_SOURCES
  # The wrapper interfaces every engine implements.
  ${CMAKE_CURRENT_LIST_DIR}/model_wrapper.cpp
  ${CMAKE_CURRENT_LIST_DIR}/optimizer_wrapper.cpp
  # Optimizer halves, with the helpers they share.
  ${CMAKE_CURRENT_LIST_DIR}/mixed_precision_optimizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/zero_optimizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gemini_optimizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/parameter_match.cpp
  ${CMAKE_CURRENT_LIST_DIR}/optimizer_scalars.cpp
  ${CMAKE_CURRENT_LIST_DIR}/optimizer_state_entries.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sharded_adam_checks.cpp
  ${CMAKE_CURRENT_LIST_DIR}/master_weights_state.cpp
  # gemini's chunks (owned by its model half, borrowed by its optimizer) and their checkpoint streaming.
  ${CMAKE_CURRENT_LIST_DIR}/gemini_chunk_owner.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gemini_state_streamer.cpp
  # Model halves.
  ${CMAKE_CURRENT_LIST_DIR}/torch_ddp_model.cpp
  ${CMAKE_CURRENT_LIST_DIR}/low_level_zero_model.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gemini_model.cpp
  ${CMAKE_CURRENT_LIST_DIR}/pipeline_model.cpp
  # Data parallelism as one step: the engine for a zero_stage, both halves and one sync handle.
  ${CMAKE_CURRENT_LIST_DIR}/data_parallel.cpp
  # What boosting a model does before any engine (dtype, device, broadcast, graphs).
  ${CMAKE_CURRENT_LIST_DIR}/parallelize.cpp
  ${CMAKE_CURRENT_LIST_DIR}/memory_size.cpp)
