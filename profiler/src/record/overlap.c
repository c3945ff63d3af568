/* Measures of interval unions and their intersection (overlap.h). */
#include "record/overlap.h"

#include <stdbool.h>

static bool ival_sorted(const moe_ival_t *v, int n)
{
    for (int i = 1; i < n; i++) {
        if (v[i].begin < v[i - 1].begin) {
            return false;
        }
    }
    return true;
}

/* Restore the max-heap (by begin) below node i of v[0..n). */
static void ival_sift(moe_ival_t *v, int i, int n)
{
    for (;;) {
        int big = i, l = 2 * i + 1, r = l + 1;
        if (l < n && v[l].begin > v[big].begin) {
            big = l;
        }
        if (r < n && v[r].begin > v[big].begin) {
            big = r;
        }
        if (big == i) {
            return;
        }
        moe_ival_t t = v[i];
        v[i] = v[big];
        v[big] = t;
        i = big;
    }
}

/* Heapsort by begin: in place and O(n log n) whatever the input (qsort may allocate). */
static void ival_sort(moe_ival_t *v, int n)
{
    if (ival_sorted(v, n)) {
        return;
    }
    for (int i = n / 2 - 1; i >= 0; i--) {
        ival_sift(v, i, n);
    }
    for (int end = n - 1; end > 0; end--) {
        moe_ival_t t = v[0];
        v[0] = v[end];
        v[end] = t;
        ival_sift(v, 0, end);
    }
}

/* Sorted v[0..n) into disjoint, non-empty, ascending intervals at its front; returns how
 * many, and their total length in *len. */
static int ival_union(moe_ival_t *v, int n, int64_t *len)
{
    int out = 0;
    *len = 0;
    for (int i = 0; i < n; i++) {
        moe_ival_t x = v[i];
        if (x.end <= x.begin) {
            continue; /* empty */
        }
        if (out > 0 && x.begin <= v[out - 1].end) {
            if (x.end > v[out - 1].end) {
                *len += x.end - v[out - 1].end;
                v[out - 1].end = x.end;
            }
            continue;
        }
        v[out++] = x;
        *len += x.end - x.begin;
    }
    return out;
}

void moe_overlap_measure(moe_ival_t *a, int na, moe_ival_t *b, int nb, int64_t *a_ns,
                         int64_t *both_ns)
{
    int64_t b_ns = 0, both = 0;
    na = na > 0 ? na : 0;
    nb = nb > 0 ? nb : 0;
    ival_sort(a, na);
    ival_sort(b, nb);
    na = ival_union(a, na, a_ns);
    nb = ival_union(b, nb, &b_ns);
    /* both lists are disjoint and ascending: advance whichever ends first */
    for (int i = 0, j = 0; i < na && j < nb;) {
        int64_t lo = a[i].begin > b[j].begin ? a[i].begin : b[j].begin;
        int64_t hi = a[i].end < b[j].end ? a[i].end : b[j].end;
        both += hi > lo ? hi - lo : 0;
        if (a[i].end < b[j].end) {
            i++;
        } else {
            j++;
        }
    }
    *both_ns = both;
}

void moe_overlap_layer(const moe_prof_layer_sample_t *s, moe_ival_t *span_scratch, int cap_spans,
                       moe_ival_t *call_scratch, int cap_calls, int64_t *inflight_ns,
                       int64_t *hidden_ns)
{
    int ns = s->num_spans < cap_spans ? s->num_spans : cap_spans;
    int nc = s->num_calls < cap_calls ? s->num_calls : cap_calls;
    for (int i = 0; i < ns; i++) {
        span_scratch[i] = (moe_ival_t){s->spans[i].begin_ns, s->spans[i].end_ns};
    }
    for (int i = 0; i < nc; i++) {
        call_scratch[i] = (moe_ival_t){s->calls[i].begin_ns, s->calls[i].end_ns};
    }
    moe_overlap_measure(span_scratch, ns, call_scratch, nc, inflight_ns, hidden_ns);
}
