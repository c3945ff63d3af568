# Run at build time (not configure time) by the moe_build_id target: writes the build id
# the start-up handshake compares and `moed --version` prints into OUT, only when it
# changed, so a commit or an edit is reflected without re-running CMake and an unchanged
# id rebuilds nothing.
#   -DSRC=<source dir> -DOUT=<file.c> [-DOUT_H=<file.h>] [-DFIXED=<id>] [-DVERSION=<x.y.z>]
# OUT_H gets the id as a macro (MOED_BUILD_ID_STRING) for the CUDA plug-in, which carries
# its own copy: the registry refuses a plug-in built from another commit.
if(FIXED)
  set(id "${FIXED}")
else()
  execute_process(COMMAND git describe --always --dirty --abbrev=12
                  WORKING_DIRECTORY "${SRC}"
                  OUTPUT_VARIABLE id OUTPUT_STRIP_TRAILING_WHITESPACE
                  ERROR_QUIET RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR NOT id)
    set(id "unknown")
  endif()
endif()
set(text "/* Generated at build time by runtime/build_id.cmake: do not edit. */\n#include \"moe/build_info.h\"\nconst char *moe_build_id(void) { return \"${id}\"; }\nconst char *moe_version(void) { return \"${VERSION}\"; }\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
else()
  set(old "")
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
if(OUT_H)
  set(text_h "/* Generated at build time by runtime/build_id.cmake: do not edit. */\n#define MOED_BUILD_ID_STRING \"${id}\"\n")
  if(EXISTS "${OUT_H}")
    file(READ "${OUT_H}" old_h)
  else()
    set(old_h "")
  endif()
  if(NOT old_h STREQUAL text_h)
    file(WRITE "${OUT_H}" "${text_h}")
  endif()
endif()
