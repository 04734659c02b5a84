# blockswap_add_test(NAME SOURCES ... LIBS ... [LABELS ...] [ENVIRONMENT ...]
#                    [TIMEOUT s])
# One GoogleTest executable in build/bin, registered with ctest. Every test
# binary shares the support main (tests/support/test_main.cc), which also
# runs the child roles that multi-process tests spawn from the same binary.
# ENVIRONMENT (VAR=value ...) is set for its test cases only (e.g. the
# stand-in CUDA driver's LD_LIBRARY_PATH, tests/standin_driver/), and for
# listing them.
include(GoogleTest)

function(blockswap_add_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;LIBS;LABELS;ENVIRONMENT" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} blockswap_test_main GTest::gtest)
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  # One ctest entry per test case, listed when ctest runs (PRE_TEST), so a
  # sanitizer build never runs binaries at build time.
  # An empty value would shift the PROPERTIES pairs, so each is passed only
  # when set.
  set(properties TIMEOUT ${ARG_TIMEOUT})
  if(ARG_LABELS)
    list(APPEND properties LABELS "${ARG_LABELS}")
  endif()
  if(ARG_ENVIRONMENT)
    # Through env(1) as the tests' launcher: gtest_discover_tests would split a
    # property value of several VAR=value entries into separate properties.
    set_target_properties(${name} PROPERTIES CROSSCOMPILING_EMULATOR "env;${ARG_ENVIRONMENT}")
  endif()
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST PROPERTIES ${properties})
endfunction()
