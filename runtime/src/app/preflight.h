/* Checks before the run: everything about a job that needs neither MPI nor a GPU.
 *
 * Rank 0 runs them after the config is parsed and before any MPI work (a run), and
 * `--check-config` runs the same ones, so a config that passes --check-config does not fail
 * later on something these could have seen: a transport or device this build lacks, a
 * weights or input file that is not there, an output folder that cannot be written (found
 * today only after the whole run). Paths are used as written: a relative path is relative
 * to the working directory of the process (docs/config.md "Relative paths"). */
#ifndef MOE_APP_PREFLIGHT_H
#define MOE_APP_PREFLIGHT_H

#include <stdbool.h>
#include <stdio.h>

#include "moe_config/config.h"
#include "moe/status.h"

/* What this build can run, fixed at compile time (MOE_HAVE_UCX, MOED_HAVE_PLUGIN from
 * runtime/CMakeLists.txt). cuda and nccl: the build has the CUDA plug-in; nothing is
 * loaded or probed to say so (a plug-in built without NCCL is found when it is loaded). */
typedef struct moe_build_caps {
    bool ucx;
    bool cuda;
    bool nccl;
} moe_build_caps_t;

moe_build_caps_t moe_build_caps(void);

/* "transports: mpi ucx; devices: cpu" — the line `moed --version` prints. */
void moe_build_caps_print(const moe_build_caps_t *caps, FILE *out);

/* What a failed check is about; the caller turns it into an exit code (docs/faults.md "Exit codes"). */
typedef enum {
    MOE_PREFLIGHT_OK = 0,
    MOE_PREFLIGHT_CONFIG, /* the config asks for what this build cannot do (exit 3) */
    MOE_PREFLIGHT_INPUT,  /* a weights or input file is missing or unreadable (exit 4) */
    MOE_PREFLIGHT_OUTPUT, /* an output folder cannot be written (exit 5) */
} moe_preflight_fail_t;

typedef struct moe_preflight_opts {
    const char *dump_output;  /* --dump-output FILE, or NULL */
    moe_build_caps_t caps;    /* normally moe_build_caps(); tests pretend other builds */
} moe_preflight_opts_t;

/* Run every check in order on a parsed config (placement resolved for cfg->world_size) and
 * return at the first failure, with one message in err that names the key (or option), the
 * path as written and, for a relative path, the absolute path tried, and the system's reason
 * ("Read-only file system"). Warnings (all steps are profiler warm-up, ranks that host no
 * experts) are printed with MOE_WARN and do not fail. Touches no MPI and no GPU; creates no
 * folder (an output folder that does not exist yet is judged by its nearest existing parent)
 * and leaves no file behind. */
moe_preflight_fail_t moe_preflight_run(const moe_config_t *cfg, const moe_preflight_opts_t *opt,
                                       moe_error_t *err);

#endif /* MOE_APP_PREFLIGHT_H */
