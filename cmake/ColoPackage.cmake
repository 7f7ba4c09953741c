# `cmake --install` installs headers, libraries, plugins, colo-run and a package config so that
# third parties can `find_package(colo)` and build plugins with colo_add_plugin().
include(CMakePackageConfigHelpers)
install(EXPORT coloTargets NAMESPACE colo:: DESTINATION "${CMAKE_INSTALL_LIBDIR}/cmake/colo")
configure_package_config_file("${CMAKE_CURRENT_LIST_DIR}/coloConfig.cmake.in"
  "${CMAKE_BINARY_DIR}/coloConfig.cmake" INSTALL_DESTINATION "${CMAKE_INSTALL_LIBDIR}/cmake/colo")
write_basic_package_version_file("${CMAKE_BINARY_DIR}/coloConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES "${CMAKE_BINARY_DIR}/coloConfig.cmake" "${CMAKE_BINARY_DIR}/coloConfigVersion.cmake"
  "${CMAKE_CURRENT_LIST_DIR}/ColoPlugin.cmake" DESTINATION "${CMAKE_INSTALL_LIBDIR}/cmake/colo")
