# blockswap_add_test(NAME SOURCES ... LIBS ... [LABELS ...])
# One GoogleTest executable in build/bin, registered with ctest. Every test
# binary shares the support main (tests/support/test_main.cc), which also
# runs the child roles that multi-process tests spawn from the same binary.
include(GoogleTest)

function(blockswap_add_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} blockswap_test_main GTest::gtest)
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  # One ctest entry per test case, listed when ctest runs (PRE_TEST), so a
  # sanitizer build never runs binaries at build time.
  gtest_discover_tests(${name}
    DISCOVERY_MODE PRE_TEST
    PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS "${ARG_LABELS}")
endfunction()
