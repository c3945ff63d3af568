/* Test control: the one door through which the tests' fault hooks reach production code (as
 * SQLite's sqlite3_test_control). Only base/testctl.c reads the hooks' environment variables,
 * once, on the first query; production code asks typed questions below and never calls getenv
 * for a hook (tests/lint/test_hooks.sh checks). A variable unset, or set to a value that does
 * not parse, leaves its hook off: the run is an ordinary one.
 *
 * The hooks: variable (the hook), value, what it does. The tests set these; keep them stable.
 *
 *   MOED_TEST_MPI_FAIL (MOE_TESTCTL_MPI_FAIL)                 agree:N
 *       the Nth agreement (moe_agree) of the process hands MPI an invalid count: a real
 *       MPI error, on every rank at once
 *   MOED_TEST_STALL (MOE_TESTCTL_STALL)                       rank:step
 *       that rank stops making progress at that step (a hung rank, for the watchdog)
 *   MOED_TEST_HOOK_DELAY_US (MOE_TESTCTL_HOOK_DELAY_US)       N
 *       rank 0's profiler step hook sleeps N us more (a cost of known size)
 *   MOED_TEST_PAUSE (MOE_TESTCTL_PAUSE)                       rank:phase
 *       that rank stops itself (SIGSTOP) at phase: startup, end, report, teardown, finalize,
 *       rebalance (after its weight moves arrived, before the switch), stepN (at step N's
 *       begin: its step N-1 completed on that rank)
 *   MOED_TEST_BUILD_ID (MOE_TESTCTL_BUILD_ID)                 text
 *       this rank's build id in the start-up handshake (even when empty)
 *   MOED_TEST_REBALANCE_DELAY_MS (MOE_TESTCTL_REBALANCE_DELAY) rank:ms
 *       that rank's rebalance moves sleep ms more (only the first pair is read)
 *   MOED_TEST_GATE_DELAY_MS (MOE_TESTCTL_GATE_DELAY)          rank:ms[,rank:ms...]
 *       those ranks' gates sleep ms more, each layer of each step
 *   MOED_TEST_EXPERT_DELAY_MS (MOE_TESTCTL_EXPERT_DELAY)      rank:ms[,rank:ms...]
 *       those ranks' experts sleep ms more, each layer of each step
 *   MOED_TEST_LOAD_DELAY_MS (MOE_TESTCTL_LOAD_DELAY)          N
 *       every piece of load progress sleeps N ms more, on every rank (clamped to 0..10000)
 *   MOED_TEST_TOUCH_MIB (MOE_TESTCTL_TOUCH)                   rank:mib[,rank:mib...]
 *       those ranks map, write and unmap mib MiB (at most 4096) in each step, at layer 0's
 *       begin: a resident peak of known size between two step boundaries
 *   MOED_TEST_ABSORB_FAIL (MOE_TESTCTL_ABSORB_FAIL)           rank
 *       rank 0's gather cannot fold that rank's second and later parts of a window into its
 *       first, as if out of memory (the parts are dropped; the report must say so)
 *   MOED_TEST_PANEL_FLOATS (MOE_TESTCTL_PANEL_FLOATS)         N
 *       BF16 weights in F32 compute are widened for the BLAS in panels of at most N floats
 *       (at least 64 rows) instead of 64 MiB's: the panels of a large matrix on small ones
 *
 * Numbers are read as sscanf's %lld (strtol for the plain N ones: a bad N reads as 0, off).
 * rank:ms hooks need ms > 0; in a list the first element naming the rank wins, and elements
 * that do not parse are skipped. */
#ifndef MOE_TESTCTL_H
#define MOE_TESTCTL_H

#include <stdbool.h>
#include <stdint.h>

typedef enum moe_testctl_hook {
    MOE_TESTCTL_MPI_FAIL,
    MOE_TESTCTL_STALL,
    MOE_TESTCTL_HOOK_DELAY_US,
    MOE_TESTCTL_PAUSE,
    MOE_TESTCTL_BUILD_ID,
    MOE_TESTCTL_REBALANCE_DELAY,
    MOE_TESTCTL_GATE_DELAY,
    MOE_TESTCTL_EXPERT_DELAY,
    MOE_TESTCTL_LOAD_DELAY,
    MOE_TESTCTL_TOUCH,
    MOE_TESTCTL_ABSORB_FAIL,
    MOE_TESTCTL_PANEL_FLOATS,
    MOE_TESTCTL_COUNT
} moe_testctl_hook_t;

/* The hook's environment variable ("MOED_TEST_..."), NULL for an unknown hook. */
const char *moe_testctl_name(moe_testctl_hook_t hook);
/* True when the hook's variable is set and parsed: the hook is armed (somewhere). */
bool moe_testctl_armed(moe_testctl_hook_t hook);
/* Reads the variables again (the first query reads them by itself, once, thread-safe).
 * For unit tests that setenv between cases; not to be called while other threads query. */
void moe_testctl_reload(void);

/* MOE_TESTCTL_MPI_FAIL: true when the process's agreement number nth (from 1) is to fail. */
bool moe_testctl_agree_fails(int64_t nth);
/* MOE_TESTCTL_STALL: the step at which `rank` stalls, -1 when it does not. */
int64_t moe_testctl_stall_step(int rank);
/* MOE_TESTCTL_HOOK_DELAY_US: the extra sleep of `rank`'s step hook in ns (0 but on rank 0). */
int64_t moe_testctl_hook_delay_ns(int rank);
/* MOE_TESTCTL_PAUSE: true when `rank` is to stop at `phase`; moe_testctl_pause_here stops
 * the process then (SIGSTOP; it goes on when continued). */
bool moe_testctl_pause_at(int rank, const char *phase);
void moe_testctl_pause_here(int rank, const char *phase);
/* MOE_TESTCTL_BUILD_ID: the build id to announce instead of the real one, NULL when unset. */
const char *moe_testctl_build_id(void);
/* The delay hooks (REBALANCE, GATE, EXPERT, LOAD): `rank`'s extra sleep in ms, 0 when none
 * (and for a hook that is no delay). */
int64_t moe_testctl_delay_ms(moe_testctl_hook_t hook, int rank);
/* Sleeps `rank`'s extra delay of that delay hook (nanosleep: costs the time, not the CPU);
 * returns at once when there is none. */
void moe_testctl_sleep(moe_testctl_hook_t hook, int rank);
/* MOE_TESTCTL_TOUCH: the MiB `rank` touches each step, 0 when none. moe_testctl_touch maps
 * them, writes every page (resident) and unmaps them (no longer resident); returns at once
 * when there are none, or when the map fails. */
int64_t moe_testctl_touch_mib(int rank);
void moe_testctl_touch(int rank);
/* MOE_TESTCTL_ABSORB_FAIL: true when rank 0 is to fail folding in a later part of `rank`. */
bool moe_testctl_absorb_fails(int rank);
/* MOE_TESTCTL_PANEL_FLOATS: the floats a BF16 widening panel may hold, `otherwise` when
 * unset. */
int64_t moe_testctl_panel_floats(int64_t otherwise);

#endif /* MOE_TESTCTL_H */
