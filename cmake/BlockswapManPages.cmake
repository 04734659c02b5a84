# Man pages of the installed programs, generated at build time by Debian's
# help2man from each program's --help (cmake/GenerateManPage.cmake) and
# installed into share/man (deploy/install-deps.sh installs help2man).
# Sanitized builds skip them: they are not installed, and a sanitizer's
# report at exit would fail the build step.
find_program(BLOCKSWAP_HELP2MAN help2man)
if(BLOCKSWAP_SANITIZE)
  return()
endif()
if(NOT BLOCKSWAP_HELP2MAN)
  message(STATUS "help2man not found: no man pages (deploy/install-deps.sh installs it)")
  return()
endif()

set(blockswap_man_dir ${PROJECT_BINARY_DIR}/man)
set(blockswap_man_pages)
# blockswap_man_page(TARGET SECTION NAME [SUBCOMMANDS]): SUBCOMMANDS adds a
# section with the help of each subcommand.
function(blockswap_man_page target section name)
  set(page ${blockswap_man_dir}/${target}.${section})
  add_custom_command(
    OUTPUT ${page}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${blockswap_man_dir}
    COMMAND ${CMAKE_COMMAND} -DPROGRAM=$<TARGET_FILE:${target}> -DOUTPUT=${page}
            -DSECTION=${section} "-DNAME=${name}" -DSUBCOMMANDS=$<BOOL:${ARGN}>
            -DHELP2MAN=${BLOCKSWAP_HELP2MAN} -P ${PROJECT_SOURCE_DIR}/cmake/GenerateManPage.cmake
    DEPENDS ${target} ${PROJECT_SOURCE_DIR}/cmake/GenerateManPage.cmake
    COMMENT "Generating the man page ${target}(${section})"
    VERBATIM)
  install(FILES ${page} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section})
  set(blockswap_man_pages ${blockswap_man_pages} ${page} PARENT_SCOPE)
endfunction()

blockswap_man_page(blockswapd 8 "node-local GPU block-swap daemon")
blockswap_man_page(blockswapctl 1 "inspect and administer blockswapd" SUBCOMMANDS)
blockswap_man_page(blockswap-demo 1 "a trainer's load loop against blockswapd, verifying every block")
add_custom_target(blockswap_man_pages ALL DEPENDS ${blockswap_man_pages})
