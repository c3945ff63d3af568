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
# write_if_changed(FILE TEXT): an unchanged file keeps its time, so nothing is rebuilt.
function(write_if_changed file text)
  set(old "")
  if(EXISTS "${file}")
    file(READ "${file}" old)
  endif()
  if(NOT old STREQUAL text)
    file(WRITE "${file}" "${text}")
  endif()
endfunction()
write_if_changed("${OUT}" "/* Generated at build time by runtime/build_id.cmake: do not edit. */\n#include \"moe/build_info.h\"\nconst char *moe_build_id(void) { return \"${id}\"; }\nconst char *moe_version(void) { return \"${VERSION}\"; }\n")
if(OUT_H)
  write_if_changed("${OUT_H}" "/* Generated at build time by runtime/build_id.cmake: do not edit. */\n#define MOED_BUILD_ID_STRING \"${id}\"\n")
endif()
