# blockswap_add_fuzzer(NAME
#                      SOURCES src...            the target: LLVMFuzzerTestOneInput
#                      LIBS lib...               linked as usual
#                      [INSTRUMENT lib...]       OBJECT libraries compiled with coverage
#                                                (-fsanitize=fuzzer-no-link): the fuzzers'
#                                                own copies of the code under test
#                      [SEED_GENERATOR target]   an executable called as `target DIR`
#                                                that writes the seed corpus into DIR
#                      [SECONDS n])              bounded run in ctest (default 15)
#
# libFuzzer targets build only with clang and BLOCKSWAP_BUILD_FUZZERS=ON
# (configuration B, where ASan and UBSan are on as well); otherwise this does
# nothing. Coverage counters go only into the INSTRUMENT object libraries,
# never into a library that other tests link: under ThreadSanitizer
# (tests/sanitize/tsan.sh) every counter increment is a reported race. Each
# fuzzer gets two ctest entries:
#   fuzz.NAME.seeds  runs the seed generator into build/fuzz/NAME/seeds
#                    (a fixture, so it runs first)
#   fuzz.NAME        runs the fuzzer for n seconds over the seeds
#                    (tests/fuzz/run-fuzzer.sh); a crash, leak or timeout fails it
# tests/fuzz/run-long.sh NAME SECONDS does longer runs by hand.
function(blockswap_add_fuzzer name)
  cmake_parse_arguments(ARG "" "SEED_GENERATOR;SECONDS" "SOURCES;LIBS;INSTRUMENT" ${ARGN})
  if(NOT BLOCKSWAP_BUILD_FUZZERS)
    return()
  endif()
  if(NOT ARG_SECONDS)
    set(ARG_SECONDS 15)
  endif()
  foreach(lib IN LISTS ARG_INSTRUMENT)
    get_target_property(type ${lib} TYPE)
    if(NOT type STREQUAL "OBJECT_LIBRARY")
      message(FATAL_ERROR "blockswap_add_fuzzer(${name}): INSTRUMENT ${lib} is a ${type}; "
                          "only a fuzzer's own OBJECT library may carry coverage counters")
    endif()
    target_compile_options(${lib} PRIVATE -fsanitize=fuzzer-no-link)
  endforeach()
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE -fsanitize=fuzzer)
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} ${ARG_INSTRUMENT})

  set(dir ${PROJECT_BINARY_DIR}/fuzz/${name})
  set(run ${PROJECT_SOURCE_DIR}/tests/fuzz/run-fuzzer.sh)
  if(ARG_SEED_GENERATOR)
    add_test(NAME fuzz.${name}.seeds COMMAND $<TARGET_FILE:${ARG_SEED_GENERATOR}> ${dir}/seeds)
    set_tests_properties(fuzz.${name}.seeds PROPERTIES FIXTURES_SETUP fuzz_${name}_seeds
                         LABELS fuzz)
  endif()
  math(EXPR timeout "${ARG_SECONDS} + 120")
  add_test(NAME fuzz.${name}
           COMMAND ${run} $<TARGET_FILE:${name}> ${ARG_SECONDS} ${dir}/work ${dir}/seeds)
  set_tests_properties(fuzz.${name} PROPERTIES TIMEOUT ${timeout} LABELS fuzz)
  if(ARG_SEED_GENERATOR)
    set_tests_properties(fuzz.${name} PROPERTIES FIXTURES_REQUIRED fuzz_${name}_seeds)
  endif()
endfunction()
