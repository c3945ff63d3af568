/* `moed --bench`: after the run, measure this machine's own limits in the same job and
 * print the run's figures against them (rank 0):
 *   - expert FFN GFLOP/s in the run vs the best single GEMMs of the same shapes (average
 *     rows per expert call), timed on every expert rank at once so contention matches;
 *   - dispatch + combine GB/s vs memcpy GB/s of the same payload. Exchange bytes count
 *     one token row per (token, chosen expert) pair in each direction, as DeepEP reports;
 *     the exchange is replayed with the last layer's counts between barriers so the
 *     figure is transport time, not time spent waiting for experts. */
#ifndef MOE_SELFBENCH_H
#define MOE_SELFBENCH_H

#include "app/engine.h"

moe_status_t moe_selfbench_run(moe_engine_t *eng, moe_error_t *err);

#endif /* MOE_SELFBENCH_H */
