/* The live path's counters message (moe/live_msg.h): bucket bounds and offsets. */
#include "moe/live_msg.h"

const double moe_live_bucket_s[MOE_LIVE_NB - 1] = {
    1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2,
    2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

int moe_live_bucket_of_ns(int64_t ns)
{
    static const int64_t bound_ns[MOE_LIVE_NB - 1] = {
        10000, 25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000,
        25000000, 50000000, 100000000, 250000000, 500000000, 1000000000, 2500000000LL,
        5000000000LL, 10000000000LL};
    int b = 0;
    while (b < MOE_LIVE_NB - 1 && ns > bound_ns[b]) {
        b++;
    }
    return b;
}

void moe_live_layout_of(int L, int E, int W, int groups, bool routes, moe_live_layout_t *out)
{
    size_t le = (size_t)L * (size_t)E, o = MOE_LIVE_HDR;
    out->step_hist = o;
    o += MOE_LIVE_NB + 1;
    out->bytes = o;
    o += (size_t)W;
    out->routed = o;
    o += routes ? le : 0;
    out->dropped = o;
    o += routes ? le : 0;
    out->groups = groups;
    out->ehist = o;
    o += (size_t)groups * (MOE_LIVE_NB + 1);
    out->total = o;
}
