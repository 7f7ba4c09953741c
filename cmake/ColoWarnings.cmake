# colo_set_warnings(target): the warning set every colo target compiles with.
function(colo_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  if(COLO_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
