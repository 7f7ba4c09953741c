list(APPEND COLO_CORE_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/action.cpp
  ${CMAKE_CURRENT_LIST_DIR}/action_costs.cpp
  ${CMAKE_CURRENT_LIST_DIR}/schedule.cpp
  ${CMAKE_CURRENT_LIST_DIR}/schedule_generators.cpp
  ${CMAKE_CURRENT_LIST_DIR}/schedule_registry.cpp
  ${CMAKE_CURRENT_LIST_DIR}/schedule_text.cpp
  ${CMAKE_CURRENT_LIST_DIR}/schedule_format.cpp
  ${CMAKE_CURRENT_LIST_DIR}/program.cpp
  ${CMAKE_CURRENT_LIST_DIR}/lower.cpp
  ${CMAKE_CURRENT_LIST_DIR}/simulator.cpp
  ${CMAKE_CURRENT_LIST_DIR}/schedule_runner.cpp
  ${CMAKE_CURRENT_LIST_DIR}/partition.cpp
  ${CMAKE_CURRENT_LIST_DIR}/stage_manager.cpp)
