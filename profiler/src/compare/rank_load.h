/* Where a report's experts ran and the load each rank carried, per layer, read from the
 * structured rows of summary.json (experts[].rank, replicas[]), never from the config
 * strings (placement.experts / placement.layers): `moed compare` and `moed plan` share it.
 * The compare part's; the planner part (`moed plan`) includes it too. */
#ifndef MOE_RANK_LOAD_H
#define MOE_RANK_LOAD_H

#include <stdint.h>

#include <jansson.h>

/* Layer `layer` of the summary `doc` (world W ranks, E experts). copies[r * E + e] = 1 when
 * rank r holds a copy of expert e (caller's [W * E], may be NULL). load[r] (caller's [W]):
 * with `demand` (the router's counts, [E]) each expert's demand split evenly over its
 * copies; without, the rows each copy computed (experts[].tokens for an expert with one
 * copy, replicas[].tokens for each copy of one with several), NAN for a rank holding a
 * copy whose tokens are null (not known). Returns the number of
 * ranks that hold at least one expert in the layer (0: the rows are missing). */
int moe_rank_loads(const json_t *doc, int layer, int W, int E, const double *demand,
                   double *load, uint8_t *copies);

/* The busiest rank's load into *mx, the mean over the ranks that hold a copy of some
 * expert (copies as moe_rank_loads fills it) into *mean; both NAN when a load is. */
void moe_rank_load_stats(const double *load, const uint8_t *copies, int W, int E, double *mx,
                         double *mean);

/* Layer `layer`'s expert compute time per rank in ms over the recorded steps, into ms[W]
 * (caller's): a copy of an expert with several its replicas[].busy_ms, an expert with one
 * its experts[] row's latency_ms.mean x calls (0 for one never called). NAN for a rank
 * holding an expert whose time is not known (a rank not profiled), 0 for a rank holding
 * none. Returns the number of
 * ranks with a known time. */
int moe_rank_times(const json_t *doc, int layer, int W, int E, double *ms);

/* The experts the run's online rebalancing moved in all (summary.json rebalances[]; 0: none),
 * and in how many rebalances into *times (may be NULL). Where it is not 0, experts[].rank and
 * replicas[] are the configured placement, not where the experts ran after a move. */
int64_t moe_rank_moved(const json_t *doc, int64_t *times);

#endif /* MOE_RANK_LOAD_H */
