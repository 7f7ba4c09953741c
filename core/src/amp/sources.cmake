list(APPEND COLO_CORE_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/precision.cpp
  ${CMAKE_CURRENT_LIST_DIR}/amax_history.cpp
  ${CMAKE_CURRENT_LIST_DIR}/master_weights.cpp
  ${CMAKE_CURRENT_LIST_DIR}/grad_clip.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dynamic_loss_scaler.cpp)
