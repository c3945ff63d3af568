/* How much of one set of time intervals another set covers: the profiler's "share of
 * exchange time hidden behind compute" (exchange spans against expert calls, per layer).
 *
 * Pure: no allocation, no lock, no system call, so the recorder calls it on the hot path
 * with copies of the layer's spans and calls in scratch arrays reserved at start. */
#ifndef MOE_OVERLAP_H
#define MOE_OVERLAP_H

#include <stdint.h>

#include "moe_prof/prof.h"

/* A half-open interval [begin, end) of ns; end <= begin is empty. */
typedef struct moe_ival {
    int64_t begin;
    int64_t end;
} moe_ival_t;

/* *a_ns = |union(a)| and *both_ns = |union(a) intersected with union(b)|, in ns, for any
 * input: unsorted, overlapping, duplicated, empty (n = 0) or zero-length intervals.
 * Intervals that only touch (one ends where the other begins) share nothing.
 *
 * Reorders and compacts a[0..na) and b[0..nb) in place (the caller passes scratch copies).
 * Cost: a check that each array is sorted by begin (O(n); the runtime hands spans and calls
 * over in the order they ran, so this usually passes), a heapsort when not (O(n log n),
 * in place), then one linear pass per array to merge it into disjoint intervals and one
 * linear walk over both: O(na + nb) for sorted input, O(na log na + nb log nb) at worst. */
void moe_overlap_measure(moe_ival_t *a, int na, moe_ival_t *b, int nb, int64_t *a_ns,
                         int64_t *both_ns);

/* One layer sample: *inflight_ns = |union of its exchange spans|, *hidden_ns = the part of
 * that during its expert calls. Copies at most cap_spans spans into span_scratch and
 * cap_calls calls into call_scratch (the runtime's bounds are 2 * chunks and chunks *
 * num_local; what lies beyond the scratch is not counted), then moe_overlap_measure. */
void moe_overlap_layer(const moe_prof_layer_sample_t *s, moe_ival_t *span_scratch, int cap_spans,
                       moe_ival_t *call_scratch, int cap_calls, int64_t *inflight_ns,
                       int64_t *hidden_ns);

#endif /* MOE_OVERLAP_H */
