list(APPEND COLO_CORE_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/environment.cpp
  ${CMAKE_CURRENT_LIST_DIR}/device.cpp
  ${CMAKE_CURRENT_LIST_DIR}/backend_choice.cpp
  ${CMAKE_CURRENT_LIST_DIR}/host_staging.cpp
  ${CMAKE_CURRENT_LIST_DIR}/process_group.cpp
  ${CMAKE_CURRENT_LIST_DIR}/work.cpp
  ${CMAKE_CURRENT_LIST_DIR}/backend_lifecycle.cpp
  ${CMAKE_CURRENT_LIST_DIR}/peer_addresses.cpp
  ${CMAKE_CURRENT_LIST_DIR}/wait_failure.cpp
  ${CMAKE_CURRENT_LIST_DIR}/collective_progress.cpp
  ${CMAKE_CURRENT_LIST_DIR}/rendezvous.cpp
  ${CMAKE_CURRENT_LIST_DIR}/admission.cpp
  ${CMAKE_CURRENT_LIST_DIR}/signed_store.cpp
  ${CMAKE_CURRENT_LIST_DIR}/hmac_sha256.cpp
  ${CMAKE_CURRENT_LIST_DIR}/mesh_layout.cpp
  ${CMAKE_CURRENT_LIST_DIR}/process_group_mesh.cpp
  ${CMAKE_CURRENT_LIST_DIR}/logger.cpp)
