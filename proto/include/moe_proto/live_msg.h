/* The live path's messages (profiler.listen; docs/live.md): every rank's
 * cumulative counters to rank 0, and rank 0's window control to every rank.
 *
 * Counters (tag MOE_LIVE_TAG_DATA, MPI_INT64_T): an array of int64. All ranks run the same
 * build (the start-up handshake checks it); int64 is little-endian on every platform moed
 * supports. The receiver checks the magic, the sender's rank and the length the header's
 * flags imply (moe_live_layout_of) before reading anything else.
 *   header[MOE_LIVE_HDR]            moe_live_hdr_t below
 *   step_hist[MOE_LIVE_NB + 1]      the sender's step times: bucket counts, then the sum in ns
 *   bytes[W]                        bytes it sent to each rank (dispatch + combine)
 *   dropped[L*E]                    only when header.routes: the expert choices it dropped
 *   rkey[R], rrows[R]               only when header.routes (R = header.rkeys): the rows it
 *                                   routed (after capacity) to each (layer, expert, rank)
 *                                   it has ever sent to, key (layer * E + expert) * W + rank
 *   hkey[G]                         only when keyed (per-expert histograms): the (layer,
 *                                   expert) of each group, key layer * E + expert
 *   ehist[G * (MOE_LIVE_NB + 1)]    expert busy time per call, per group (G = header.groups):
 *                                   keyed, one group per (layer, expert) the sender has ever
 *                                   hosted; else one per layer; bucket counts, then ns
 * Keys name what actually ran: the layer's placement as the runtime used it (per-layer
 * placement, replicas, online rebalancing), so a moved expert's counts stay with the rank
 * that computed them. A sender only appends keys (counters never go down); R <= L*E*W and
 * G <= L*E.
 *
 * Control (tag MOE_LIVE_TAG_CTRL, MPI_INT64_T, rank 0 to every other rank):
 *   [MOE_LIVE_CTRL_WINDOW]  the window's id
 *   [MOE_LIVE_CTRL_FIRST]   its first step
 *   [MOE_LIVE_CTRL_LAST]    its last step
 *   [MOE_LIVE_CTRL_ALL]     1: every rank records; 0: the bit mask follows
 *   [MOE_LIVE_CTRL_MASK..]  ranks that record, bit r%64 of word r/64; moe_live_ctrl_len(W)
 *                           words in all. */
#ifndef MOE_LIVE_MSG_H
#define MOE_LIVE_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MOE_LIVE_MAGIC 0x4d4f45444c495645LL /* "MOEDLIVE"; the header holds it ^ version */
#define MOE_LIVE_VERSION 3
#define MOE_LIVE_NB 20                      /* histogram buckets, the last one +Inf */

enum { MOE_LIVE_TAG_DATA = 4501, MOE_LIVE_TAG_CTRL = 4502 };
enum { MOE_LIVE_KIND_PERIODIC = 0, MOE_LIVE_KIND_FIN = 2 }; /* 1 was version 1's mark */

typedef enum {
    MOE_LIVE_HDR_MAGIC = 0,
    MOE_LIVE_HDR_RANK,
    MOE_LIVE_HDR_STEP,      /* last completed step, -1 before the first */
    MOE_LIVE_HDR_KIND,
    MOE_LIVE_HDR_RKEYS,     /* routed keys that follow (0 unless routes) */
    MOE_LIVE_HDR_GROUPS,    /* expert histogram groups */
    MOE_LIVE_HDR_RSS,       /* resident bytes */
    MOE_LIVE_HDR_ROUTES,    /* 1: routed and dropped follow */
    MOE_LIVE_HDR_STEPS,     /* steps completed */
    MOE_LIVE_HDR_COUNT
} moe_live_hdr_t;
#define MOE_LIVE_HDR MOE_LIVE_HDR_COUNT

enum {
    MOE_LIVE_CTRL_WINDOW = 0,
    MOE_LIVE_CTRL_FIRST,
    MOE_LIVE_CTRL_LAST,
    MOE_LIVE_CTRL_ALL,
    MOE_LIVE_CTRL_MASK
};
static inline size_t moe_live_ctrl_len(int world)
{
    return MOE_LIVE_CTRL_MASK + ((size_t)world + 63) / 64;
}

/* Bucket upper bounds in seconds (MOE_LIVE_NB - 1 of them; the last bucket is +Inf). */
extern const double moe_live_bucket_s[MOE_LIVE_NB - 1];
int moe_live_bucket_of_ns(int64_t ns);

/* Offsets of each part of a counters message, in int64 units. */
typedef struct moe_live_layout {
    size_t step_hist, bytes, dropped, rkey, rrows, hkey, ehist, total;
    int64_t rkeys;              /* routed keys */
    int64_t groups;             /* expert histogram groups */
    bool routes, keyed;
} moe_live_layout_t;

/* L layers, E experts, W ranks; routes: the sender routes, with rkeys keys; keyed: its
 * groups expert histograms are per (layer, expert) with their keys. */
void moe_live_layout_of(int L, int E, int W, bool routes, int64_t rkeys, bool keyed,
                        int64_t groups, moe_live_layout_t *out);

/* The layout a received message's header claims, checked against the run's shape and its
 * length n; false when the message is malformed (bad magic, rank, counts, length or key). */
bool moe_live_layout_check(const int64_t *m, size_t n, int src, int L, int E, int W,
                           bool keyed, moe_live_layout_t *out);

#endif /* MOE_LIVE_MSG_H */
