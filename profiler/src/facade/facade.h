/* The profiler's own calls above the public ones (moe_prof/prof.h): the on-demand windows the
 * live path records (POST /profile). Defined by facade/prof.c, over record/ and gather/. */
#ifndef MOE_FACADE_H
#define MOE_FACADE_H

#include "gather/gather.h" /* moe_od_set_t */

/* On-demand windows (the live path's POST /profile): a second recorder on its own
 * communicator whose windows are set at run time, not by the schedule. The ranks record
 * the window's steps as the end-of-run profiler does and send them to rank 0 in parts
 * (the same gather path); rank 0 never waits for them at a step: it takes what arrived at
 * each step boundary and, once every chosen rank's last part is in (or after a grace), hands
 * the set over to be written (moe_prof_od_write, on any thread). The memory series is read
 * at the window's step boundaries (moe_step_mem_t), not by a sampler thread. */

/* Collective, like moe_prof_create. max_steps bounds the per-step lists reserved. */
moe_status_t moe_prof_od_create(const moe_config_t *cfg, MPI_Comm comm,
                                const moe_prof_static_t *info, int64_t max_steps,
                                moe_prof_t **out, moe_error_t *err);
/* Every rank, once it knows the window: steps first..last, ranks[W] (NULL: all). */
void moe_prof_od_arm(moe_prof_t *p, int64_t first, int64_t last, const bool *ranks);
/* Every rank after each step (in place of moe_prof_step_end). Rank 0: true when a window's
 * set is complete, moved into *out (free it with moe_prof_od_free). */
bool moe_prof_od_step_end(moe_prof_t *p, int64_t step, int64_t begin_ns, int64_t end_ns,
                          moe_od_set_t *out);
/* Every rank: rank 0 has told a nearer last step for the armed window (DELETE /profile):
 * recorded up to it (at least the next step here, at least its first). */
void moe_prof_od_cut(moe_prof_t *p, int64_t last);
/* Every rank at the run's end, step its last completed step: a window that has begun here
 * is closed at that step (non-root: its last part sent, waited for until deadline_ns); one
 * not begun is dropped. Rank 0: true when a window is now being gathered. */
bool moe_prof_od_end(moe_prof_t *p, int64_t step, int64_t end_ns, int64_t deadline_ns);
/* Rank 0 after moe_prof_od_end (or with a window closed and still gathering): the rest of
 * its parts until every chosen rank's last one is in or deadline_ns; true with the set in
 * *out. */
bool moe_prof_od_collect(moe_prof_t *p, int64_t deadline_ns, moe_od_set_t *out);
/* Merge the set and write the full report folder `dir` (whole or absent, INCOMPLETE). */
moe_status_t moe_prof_od_write(moe_od_set_t *set, const char *dir, moe_error_t *err);
/* Free a set's contents (accepts an empty or already freed set). */
void moe_prof_od_free(moe_od_set_t *set);

#endif /* MOE_FACADE_H */
