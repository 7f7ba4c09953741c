list(APPEND COLO_CORE_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/adam_moments_param_state.cpp
  ${CMAKE_CURRENT_LIST_DIR}/hybrid_adam.cpp
  ${CMAKE_CURRENT_LIST_DIR}/adam_cpu_kernel.cpp
  ${CMAKE_CURRENT_LIST_DIR}/lamb.cpp
  ${CMAKE_CURRENT_LIST_DIR}/lr_scheduler.cpp
  ${CMAKE_CURRENT_LIST_DIR}/optimizer_state.cpp
  ${CMAKE_CURRENT_LIST_DIR}/step_lr.cpp)
# The Adam inner loop vectorises only when sqrt need not set errno; it includes no LibTorch
# header, so the precompiled header (built with other flags) is not used for it.
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/adam_cpu_kernel.cpp PROPERTIES
  COMPILE_OPTIONS "-fno-math-errno" SKIP_PRECOMPILE_HEADERS ON)
