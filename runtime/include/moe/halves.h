/* A second thread for the routing rank's row loops: a loop over n rows runs as two halves
 * at once, the caller's thread taking the first, the helper the second.
 *
 * Why: with master routing, the master's gate, permutation and merge run while every expert
 * rank waits for them (~4 ms a layer of the default job on Zen 5: ~4% of the step), on one
 * core, while the expert ranks' cores idle. All three are row-wise and memory-bound; two
 * cores finish them sooner. The helper sleeps on a condition variable between loops (no
 * spinning on the experts' cores, unlike an OpenMP pool's default wait), so it costs
 * nothing while the experts compute.
 *
 * The halves must be independent (each row's result depends on that row alone), so the
 * results are the same bits as one thread's. */
#ifndef MOE_HALVES_H
#define MOE_HALVES_H

#include <stdbool.h>
#include <stdint.h>

#include "moe/status.h"

typedef struct moe_halves moe_halves_t;

/* fn(arg, lo, hi): rows [lo, hi). */
typedef void (*moe_halves_fn)(void *arg, int64_t lo, int64_t hi);

/* The helper thread (short_slice: it asks for a short scheduler slice, moe/sched.h, as the
 * routing rank's main thread does). */
moe_status_t moe_halves_create(bool short_slice, moe_halves_t **out, moe_error_t *err);
/* fn over [0, n): [0, n/2) here, [n/2, n) on the helper, returning when both are done. h
 * NULL, or n < min_split: all here. */
void moe_halves_run(moe_halves_t *h, moe_halves_fn fn, void *arg, int64_t n, int64_t min_split);
/* Ends and joins the helper (accepts NULL). */
void moe_halves_destroy(moe_halves_t *h);

#endif /* MOE_HALVES_H */
