# Run at build time (cmake/BlockswapManPages.cmake): writes OUTPUT, the man
# page of PROGRAM, with Debian's help2man from the program's own --help and
# --version, so that the page cannot drift from the program. With
# SUBCOMMANDS=ON, a COMMANDS section gets `PROGRAM help COMMAND` of every
# subcommand that `PROGRAM --help` lists (CLI11's "Subcommands:" section).
#   cmake -DPROGRAM=... -DOUTPUT=... -DSECTION=1 -DNAME=... [-DSUBCOMMANDS=ON]
#         -DHELP2MAN=... -P GenerateManPage.cmake
cmake_minimum_required(VERSION 3.20)
set(include_file "${OUTPUT}.include")
if(SUBCOMMANDS)
  file(WRITE "${include_file}" "")
  execute_process(COMMAND "${PROGRAM}" --help OUTPUT_VARIABLE help RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${PROGRAM} --help exited ${rc}")
  endif()
  string(REGEX REPLACE ".*\nSubcommands:\n" "" listed "${help}")
  string(REGEX MATCHALL "(^|\n)  [a-z][a-z-]*" names "${listed}")
  set(commands)
  foreach(name IN LISTS names)
    string(STRIP "${name}" name)
    if(NOT name STREQUAL "help")
      list(APPEND commands ${name})
    endif()
  endforeach()
  if(NOT commands)
    message(FATAL_ERROR "${PROGRAM} --help lists no subcommands")
  endif()
  file(APPEND "${include_file}" "[COMMANDS]\n")
  foreach(command IN LISTS commands)
    execute_process(COMMAND "${PROGRAM}" help ${command} OUTPUT_VARIABLE text
                    RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "${PROGRAM} help ${command} exited ${rc}")
    endif()
    # roff: a leading dot or quote would be a request; a backslash an escape.
    string(REPLACE "\\" "\\\\" text "${text}")
    string(REGEX REPLACE "(^|\n)([.'])" "\\1\\\\&\\2" text "${text}")
    file(APPEND "${include_file}" ".SS ${command}\n.nf\n${text}.fi\n")
  endforeach()
endif()
set(include_option)
if(SUBCOMMANDS)
  set(include_option "--include=${include_file}")
endif()
execute_process(
  COMMAND "${HELP2MAN}" --no-info --no-discard-stderr "--section=${SECTION}" "--name=${NAME}"
          ${include_option} "--output=${OUTPUT}" "${PROGRAM}"
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "help2man ${PROGRAM} exited ${rc}")
endif()
file(REMOVE "${include_file}")
