list(APPEND COLO_TRAINER_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/trainer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/trainer_record.cpp
  ${CMAKE_CURRENT_LIST_DIR}/progress_line.cpp
  ${CMAKE_CURRENT_LIST_DIR}/trainer_metric_hooks.cpp
  ${CMAKE_CURRENT_LIST_DIR}/trainer_action_hooks.cpp
  ${CMAKE_CURRENT_LIST_DIR}/metrics_log.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tensorboard_hook.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tensorboard/tfrecord.cpp
  ${CMAKE_CURRENT_LIST_DIR}/nonfinite_loss_guard.cpp
  ${CMAKE_CURRENT_LIST_DIR}/reduce_over_ranks.cpp
  ${CMAKE_CURRENT_LIST_DIR}/throughput_window.cpp
  # Where a run keeps its checkpoints, and the lock that keeps two runs out of one directory.
  ${CMAKE_CURRENT_LIST_DIR}/state_directory.cpp
  ${CMAKE_CURRENT_LIST_DIR}/run_lock.cpp)
