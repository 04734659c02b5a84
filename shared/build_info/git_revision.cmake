# Writes OUTPUT (git_revision.h) with the revision of SOURCE_DIR, or
# "unknown" outside a git checkout or without git: a tarball must still build.
# The file is rewritten only when its text changes (configure_file's rule), so
# the binaries relink only after a commit.
# Run with cmake -P, where policies default to OLD without this.
cmake_minimum_required(VERSION 3.20)
set(BLOCKSWAP_GIT_REVISION "unknown")
if(GIT_EXECUTABLE)
  execute_process(
    COMMAND ${GIT_EXECUTABLE} -C ${SOURCE_DIR} describe --always --dirty --abbrev=12
    OUTPUT_VARIABLE revision
    OUTPUT_STRIP_TRAILING_WHITESPACE
    ERROR_QUIET
    RESULT_VARIABLE failed)
  if(NOT failed AND revision)
    set(BLOCKSWAP_GIT_REVISION "${revision}")
  endif()
endif()
file(CONFIGURE OUTPUT ${OUTPUT} CONTENT [[
// Generated at build time by shared/build_info/git_revision.cmake.
#ifndef BLOCKSWAP_SHARED_BUILD_INFO_GIT_REVISION_H_
#define BLOCKSWAP_SHARED_BUILD_INFO_GIT_REVISION_H_
#define BLOCKSWAP_BUILD_GIT_REVISION "@BLOCKSWAP_GIT_REVISION@"
#endif  // BLOCKSWAP_SHARED_BUILD_INFO_GIT_REVISION_H_
]] @ONLY)
