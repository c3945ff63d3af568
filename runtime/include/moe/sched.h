/* A short scheduler time slice for threads that mostly wait.
 *
 * On Linux 6.6 and later (EEVDF) a task that wakes from a nap onto a core where another
 * task computes waits until that task's slice runs out before it runs: measured 4-8 ms late
 * after about one in two of the master's long naps (kernel 6.18, 2 cores, HZ 250), which
 * delays the next layer for every rank. Since Linux 6.12 a task with a shorter slice than
 * the running one preempts it on waking (measured 0.02-0.07 ms late). The routing rank of a
 * node shared with expert ranks asks for one (app/bind.c), and so does its row helper
 * (moe/halves.h). Older kernels ignore the request or refuse it; either way the thread runs
 * as before. */
#ifndef MOE_SCHED_H
#define MOE_SCHED_H

#include <stdbool.h>

/* The slice asked for (the kernel's least is 0.1 ms). */
#define MOE_SCHED_WAIT_SLICE_NS 100000ULL

/* Ask for a MOE_SCHED_WAIT_SLICE_NS slice under the normal policy for the calling thread
 * (sched_setattr's sched_runtime). False where refused or not built. */
bool moe_sched_short_slice(void);
/* The calling thread's slice as the kernel reports it (sched_getattr's sched_runtime: 0
 * where the kernel keeps none, before 6.12), or -1 when it cannot be read. */
long long moe_sched_slice_ns(void);

#endif /* MOE_SCHED_H */
