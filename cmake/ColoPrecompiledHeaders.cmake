# One precompiled header (cmake/pch/colo_pch.h), built once by colo_pch and reused by every
# target through colo_use_pch(). Reuse requires identical flags, so every colo target compiles
# with -fPIC (executables included) and none defines a per-target export macro.
set(CMAKE_POSITION_INDEPENDENT_CODE OFF)
add_compile_options(-fPIC)
add_library(colo_pch OBJECT "${CMAKE_CURRENT_LIST_DIR}/pch/pch_anchor.cpp")
target_link_libraries(colo_pch PUBLIC colo_torch colo_fmt)
target_precompile_headers(colo_pch PRIVATE "${CMAKE_CURRENT_LIST_DIR}/pch/colo_pch.h")
colo_set_warnings(colo_pch)

function(colo_use_pch target)
  target_precompile_headers(${target} REUSE_FROM colo_pch)
  set_target_properties(${target} PROPERTIES DEFINE_SYMBOL "")
endfunction()
