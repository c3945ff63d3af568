/* Pinning a rank's threads to cores of its own (runtime.bind).
 *
 * Three unpinned busy processes on two cores lose a good part of a core to the scheduler
 * moving them about; pinned, the two expert ranks each keep a core and the master, which
 * mostly waits (moe/poll.h naps), shares one. So when a node's ranks need more cores than
 * the process may use and nobody pinned them (the affinity mask is every online CPU),
 * `auto` pins the node's ranks that host experts, one slot of runtime.threads CPUs each in
 * rank order, and leaves the others (the master) on every CPU: their waits nap, and their
 * row loops run on two threads while the expert ranks wait (moe/halves.h). `core` pins
 * those too, round robin over the slots after the expert ranks. It leaves the ranks
 * alone when the expert ranks alone need more slots than there are (pinning would then
 * give two of them half a core each, worse than the scheduler's thirds). `core` pins the
 * same way whatever the load; `none` never pins. Local: the hosts table says which ranks
 * share this node. Every thread of the process is moved (OpenBLAS's pool, MPI's).
 *
 * A rank that hosts no experts but shares its node with ranks that do (the master) also
 * asks the scheduler for a short time slice (moe/sched.h), unless runtime.bind is `none`
 * (which leaves its main thread's scheduling alone; its row helper asks either way). */
#ifndef MOE_APP_BIND_H
#define MOE_APP_BIND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "moe_config/config.h"

/* What the rule decides for one rank, as a pure function (unit-tested):
 * local_ranks: the node's ranks in rank order, expert[i]: whether local_ranks[i] hosts
 * experts; me: this rank's index in local_ranks; ncpu: CPUs this process may use; full:
 * that set is every online CPU (nobody pinned it). Returns the slot (>= 0; the CPUs
 * [slot * threads, (slot + 1) * threads) of the allowed set, in order) or -1: do not pin. */
int moe_bind_slot(moe_bind_t mode, const bool *expert, int nlocal, int me, int ncpu, int threads,
                  bool full);

/* What the rule decides for a node's ranks (as moe_bind_slot, for each of them): "none"
 * (no rank pinned), "core" (every rank pinned) or "experts" (auto: the ranks hosting experts
 * pinned, the others on every CPU). runtime.bind as resolved, for the report. */
const char *moe_bind_node_name(moe_bind_t mode, const bool *expert, int nlocal, int ncpu,
                               int threads, bool full);

/* Apply runtime.bind on this rank (hosts: [world][64], every rank's host). Never fails the
 * run: a refused sched_setaffinity leaves the process as it was. *pinned_cpu: the first
 * CPU of the slot, -1 when not pinned. desc: one line for the summary ("" when not pinned).
 * Returns moe_bind_node_name for this rank's node, as this rank sees its CPUs ("none" when
 * they cannot be read). */
const char *moe_bind_apply(const moe_config_t *cfg, int rank, int world,
                           const char (*hosts)[64], int *pinned_cpu, char *desc,
                           size_t desc_len);

/* Whether a node's ranks share cores: nlocal ranks of `threads` threads each outnumber its
 * `online` CPUs (unknown, <= 0: taken as shared). A wait then yields the core between its
 * tests while bytes flow (moe_poll_set_yield); where every rank has a core of its own it
 * spins without the system call. */
bool moe_bind_shares_cores(int nlocal, int threads, long online);
/* A process's CPU affinity mask (1024 CPUs), in a form MPI can gather. */
#define MOE_BIND_MASK_WORDS 16
typedef struct moe_cpu_mask {
    uint64_t w[MOE_BIND_MASK_WORDS];
} moe_cpu_mask_t;
/* This process's mask (sched_getaffinity; all zero when it cannot be read). */
void moe_bind_own_mask(moe_cpu_mask_t *m);
/* The CPUs the node's ranks may use between them: the union of the masks of the ranks on
 * `rank`'s host (masks, hosts: [world]); 0 when none can be read. */
int moe_bind_node_cpus(const moe_cpu_mask_t *masks, const char (*hosts)[64], int rank,
                       int world);
/* The same for this rank's node (hosts: [world][64], every rank's host; masks: [world],
 * every rank's affinity mask before runtime.bind pins it, or NULL): its ranks' threads
 * against the CPUs their masks cover together (a cpuset smaller than the host counts, and
 * ranks mpirun bound to a core each do not share), at most the online CPUs. */
bool moe_bind_node_shares_cores(const moe_config_t *cfg, int rank, int world,
                                const char (*hosts)[64], const moe_cpu_mask_t *masks);

/* The CPUs this process may use (its affinity mask: taskset, mpirun's binding, a cpuset),
 * or -1 when the mask cannot be read. */
int moe_bind_cpus_allowed(void);

#endif /* MOE_APP_BIND_H */
