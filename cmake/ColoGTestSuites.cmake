# colo_add_gtest_suites(TARGET [PROPERTIES prop value ...]): one CTest test per GoogleTest *suite*
# of TARGET (`--gtest_filter=Suite.*`), where gtest_discover_tests makes one per test case.
#
# Why: every process of a test binary linked against LibTorch spends about a second in static
# initialisation before its first test (1.0 s for colo_unit_tests on the CI's 2-core machine, with
# Debian's LibTorch 1.13). One process per case cost ~560 of the unit tests' ~830 s in CI; one per
# suite (~120 of them) costs ~120 s, and a failure still names its case in the suite's output.
#
# The suites are read from the binary itself (`--gtest_list_tests`) when ctest starts, and again only
# after the binary (or this function) changes, so a new suite needs no CMake edit. A suite whose every case skipped is
# reported as skipped (tests/run_gtest_suite.sh); a case that skips beside others that pass is listed
# in the suite's own output (ctest --output-on-failure shows it only when the suite fails).
function(colo_add_gtest_suites target)
  cmake_parse_arguments(arg "" "" "PROPERTIES" ${ARGN})
  set(properties "")
  foreach(word IN LISTS arg_PROPERTIES)
    string(APPEND properties " [==[${word}]==]")
  endforeach()
  set(listing "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites.cmake")
  set(runner "${PROJECT_SOURCE_DIR}/tests/run_gtest_suite.sh")
  set(include_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites_include.cmake")
  file(GENERATE OUTPUT "${include_file}" CONTENT "\
set(exe [==[$<TARGET_FILE:${target}>]==])
set(listing [==[${listing}]==])
if(NOT EXISTS \"\${exe}\")
  add_test(${target}_NOT_BUILT ${target}_NOT_BUILT)
else()
  if(NOT EXISTS \"\${listing}\" OR NOT \"\${listing}\" IS_NEWER_THAN \"\${exe}\" OR
     NOT \"\${listing}\" IS_NEWER_THAN \"\${CMAKE_CURRENT_LIST_FILE}\")
    execute_process(COMMAND \"\${exe}\" --gtest_list_tests OUTPUT_VARIABLE out RESULT_VARIABLE rc TIMEOUT 120)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR \"\${exe} --gtest_list_tests failed (\${rc}): \${out}\")
    endif()
    # Suite lines start in the first column and end in '.' (a typed suite's may carry a comment).
    string(REGEX MATCHALL \"\\n[A-Za-z_][A-Za-z0-9_/]*\\\\.\" suites \"\\n\${out}\")
    set(script \"\")
    foreach(suite IN LISTS suites)
      string(STRIP \"\${suite}\" suite)
      string(REGEX REPLACE \"\\\\.$\" \"\" suite \"\${suite}\")
      string(APPEND script \"add_test([=[\${suite}]=] sh [==[${runner}]==] [==[\${exe}]==] [==[--gtest_filter=\${suite}.*]==])\\n\")
      string(APPEND script \"set_tests_properties([=[\${suite}]=] PROPERTIES WORKING_DIRECTORY [==[${CMAKE_CURRENT_BINARY_DIR}]==] \")
      string(APPEND script \"SKIP_RETURN_CODE 77${properties})\\n\")
    endforeach()
    file(WRITE \"\${listing}\" \"\${script}\")
  endif()
  include(\"\${listing}\")
endif()
")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${include_file}")
endfunction()
