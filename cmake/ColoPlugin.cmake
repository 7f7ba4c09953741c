# colo_add_plugin(<name> SOURCES <files...> [LIBRARIES <targets...>])
# Builds libcolo_plugin_<name>.so, a module the PluginRegistry loads with Boost.DLL. Works in
# the colo source tree and, installed with the package, for third parties (find_package(colo)).
function(colo_add_plugin name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBRARIES" ${ARGN})
  set(target colo_plugin_${name})
  add_library(${target} MODULE ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE colo::booster ${ARG_LIBRARIES})
  target_compile_features(${target} PRIVATE cxx_std_17)
  set_target_properties(${target} PROPERTIES PREFIX "lib" OUTPUT_NAME "colo_plugin_${name}")
  if(DEFINED COLO_PLUGIN_BUILD_DIR)  # inside the colo tree
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${COLO_PLUGIN_BUILD_DIR}"
      INSTALL_RPATH "$ORIGIN/../..")
    colo_use_pch(${target})
    colo_set_warnings(${target})
    install(TARGETS ${target} LIBRARY DESTINATION "${COLO_PLUGIN_INSTALL_DIR}")
  endif()
endfunction()
