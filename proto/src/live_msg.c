/* The live path's counters message (moe_proto/live_msg.h): bucket bounds and offsets. */
#include "moe_proto/live_msg.h"

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

void moe_live_layout_of(int L, int E, int W, bool routes, int64_t rkeys, bool keyed,
                        int64_t groups, moe_live_layout_t *out)
{
    size_t le = (size_t)L * (size_t)E, o = MOE_LIVE_HDR;
    rkeys = routes ? rkeys : 0;
    out->routes = routes;
    out->keyed = keyed;
    out->rkeys = rkeys;
    out->groups = groups;
    out->step_hist = o;
    o += MOE_LIVE_NB + 1;
    out->bytes = o;
    o += (size_t)W;
    out->dropped = o;
    o += routes ? le : 0;
    out->rkey = o;
    o += (size_t)rkeys;
    out->rrows = o;
    o += (size_t)rkeys;
    out->hkey = o;
    o += keyed ? (size_t)groups : 0;
    out->ehist = o;
    o += (size_t)groups * (MOE_LIVE_NB + 1);
    out->total = o;
}

bool moe_live_layout_check(const int64_t *m, size_t n, int src, int L, int E, int W,
                           bool keyed, moe_live_layout_t *out)
{
    int64_t le = (int64_t)L * E;
    if (n < MOE_LIVE_HDR || m[MOE_LIVE_HDR_MAGIC] != (MOE_LIVE_MAGIC ^ MOE_LIVE_VERSION) ||
        m[MOE_LIVE_HDR_RANK] != src) {
        return false;
    }
    bool routes = m[MOE_LIVE_HDR_ROUTES] != 0;
    int64_t rkeys = m[MOE_LIVE_HDR_RKEYS], groups = m[MOE_LIVE_HDR_GROUPS];
    if (rkeys < 0 || rkeys > le * W || (!routes && rkeys != 0) || groups < 0 ||
        (keyed ? groups > le : groups != L)) {
        return false;
    }
    moe_live_layout_of(L, E, W, routes, rkeys, keyed, groups, out);
    if (out->total != n) {
        return false;
    }
    for (int64_t i = 0; i < rkeys; i++) {
        if (m[out->rkey + (size_t)i] < 0 || m[out->rkey + (size_t)i] >= le * W) {
            return false;
        }
    }
    for (int64_t i = 0; keyed && i < groups; i++) {
        if (m[out->hkey + (size_t)i] < 0 || m[out->hkey + (size_t)i] >= le) {
            return false;
        }
    }
    return true;
}
