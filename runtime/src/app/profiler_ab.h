/* --profiler-ab K: what the profiler's hooks cost in tokens/s, measured inside one run.
 * Blocks of K steps alternate with the hooks on and off in pairs whose order alternates
 * (on-off, off-on, on-off, ...), so a drift of the machine's speed over the run (other
 * tenants, frequency) weighs on both alike, and each pair compares two neighbouring
 * stretches of the same process on the same cores: the run-to-run spread of separate
 * runs (here up to +-20% at 1 ms steps) is not in it. */
#ifndef MOE_APP_PROFILER_AB_H
#define MOE_APP_PROFILER_AB_H

#include <stdbool.h>
#include <stdint.h>

typedef struct moe_ab_result {
    int64_t pairs;         /* pairs used (pair 0 is left out as warm-up when >= 3 ran) */
    double on_ms_per_step;  /* mean over the used pairs' on blocks */
    double off_ms_per_step;
    double median;          /* of the pairs' tokens/s on / off (= off time / on time) */
    double mean, lo, hi;    /* their mean and its 95% interval (1.96 standard errors) */
    double totals;          /* all used off time / all used on time */
} moe_ab_result_t;

/* Is step s (0-based) in an on block of k-step blocks? */
bool moe_ab_step_on(int64_t k, int64_t s);

/* From the completed blocks' wall times in run order (block b holds steps [b*k,
 * (b+1)*k)): 0, or -1 when not one whole pair ran. */
int moe_ab_compute(const int64_t *block_ns, int64_t blocks, int64_t k, moe_ab_result_t *out);

#endif /* MOE_APP_PROFILER_AB_H */
