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

# The stand-in CUDA driver (tests/standin_driver/, a test double of
# libcuda.so.1), where the CUDA toolkit's headers are: its folder, and what a
# test over it runs with (its libcuda.so.1 first; a breach of CUDA's rules
# aborts the process that made it).
if(CUDAToolkit_FOUND)
  set(BLOCKSWAP_STANDIN_LIBRARY_PATH ${PROJECT_BINARY_DIR}/standin_driver)
  set(BLOCKSWAP_STANDIN_ENVIRONMENT LD_LIBRARY_PATH=${BLOCKSWAP_STANDIN_LIBRARY_PATH}
      BLOCKSWAP_STANDIN_VIOLATIONS=abort)
endif()

# blockswap_add_standin_test(NAME COMMAND ... [TIMEOUT s] [DEPENDS target...])
# One ctest entry, standin.NAME (label `standin`), that runs COMMAND over the
# stand-in CUDA driver: the cuda backend's tests without a GPU. The same
# binaries' own entries stay as they are (on a GPU machine they use the GPU).
# A GoogleTest case that skips fails the entry: over the stand-in nothing may
# pass by not running (filter out, with the reason, what cannot run there).
# Nothing where the stand-in is not built (configuration B), nor in a build
# without test hooks (shared/base/test_hooks.h).
function(blockswap_add_standin_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "COMMAND;DEPENDS" ${ARGN})
  # Without test hooks the mutation cases skip, which fails an entry here.
  if(NOT CUDAToolkit_FOUND OR NOT BLOCKSWAP_TEST_HOOKS)
    return()
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  add_test(NAME standin.${name} COMMAND env ${BLOCKSWAP_STANDIN_ENVIRONMENT} ${ARG_COMMAND})
  set_tests_properties(standin.${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS standin
                       FAIL_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
  foreach(target IN LISTS ARG_DEPENDS)
    add_dependencies(${target} blockswap_standin_driver)
  endforeach()
endfunction()
