/* What this build is: the version and the build id (git commit, "-dirty" for local
 * changes, or -DMOED_BUILD_ID=...). The id is taken when the build runs, not when CMake
 * configures, so it follows every commit; the start-up handshake compares it between
 * ranks. Part of the base layer. */
#ifndef MOE_BUILD_INFO_H
#define MOE_BUILD_INFO_H

const char *moe_build_id(void); /* never NULL */
const char *moe_version(void);  /* "0.1.0" */

#endif /* MOE_BUILD_INFO_H */
