/* EPLB's three steps (see eplb.h): replicate_experts, balanced_packing, and the
 * hierarchical order (nodes first). Unlike eplb.py a rank never holds two copies of one
 * expert (the config rejects that), and ranks may hold different numbers of copies. */
#include "moe_config/eplb.h"

#include <stdlib.h>
#include <string.h>

double moe_eplb_max_mean(const double *v, int n)
{
    return moe_eplb_max_mean_held(v, NULL, n);
}

double moe_eplb_max_mean_held(const double *v, const bool *holds, int n)
{
    double mx = 0, sum = 0;
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (holds == NULL || holds[i]) {
            mx = v[i] > mx ? v[i] : mx;
            sum += v[i];
            m++;
        }
    }
    return sum > 0 && m > 0 ? mx / (sum / m) : 0.0;
}

typedef struct eplb_item {
    int expert;
    double w;
} eplb_item_t;

static int item_cmp(const void *pa, const void *pb)
{
    const eplb_item_t *a = pa, *b = pb;
    if (a->w != b->w) {
        return a->w > b->w ? -1 : 1;
    }
    return a->expert - b->expert;
}

/* Experts es[m] on ranks rs[k] (indices into in->ranks) with R extra copies, at most
 * `slots` copies per rank. replicate: each extra copy goes to the expert with the largest
 * load per copy (eplb.py's replicate_experts), never beyond one copy per rank. pack: copies
 * heaviest first, each onto the least loaded rank with a free slot that lacks that expert
 * (balanced_packing). */
static moe_status_t eplb_flat(const moe_eplb_in_t *in, const int *es, int m, const int *rs,
                              int k, int R, int slots, moe_eplb_out_t *out, moe_error_t *err)
{
    int E = in->num_experts, total = m + R, n = 0;
    int *cnt = calloc((size_t)(m > 0 ? m : 1), sizeof(int));
    int *used = calloc((size_t)(k > 0 ? k : 1), sizeof(int));
    eplb_item_t *items = calloc((size_t)(total > 0 ? total : 1), sizeof(*items));
    moe_status_t st = cnt && used && items ? MOE_OK : MOE_ERR_NO_MEMORY;
    for (int i = 0; st == MOE_OK && i < m; i++) {
        cnt[i] = 1;
    }
    for (int c = 0; st == MOE_OK && c < R; c++) {
        int best = -1;
        for (int i = 0; i < m; i++) {
            double wi = in->loads[es[i]] / cnt[i];
            if (cnt[i] < k && (best < 0 || wi > in->loads[es[best]] / cnt[best])) {
                best = i;
            }
        }
        if (best < 0) {
            st = moe_error_set(err, MOE_ERR_INVALID_ARG, "--redundant %d: more copies than "
                               "ranks can hold apart (%d experts on %d ranks)", R, m, k);
        } else {
            cnt[best]++;
        }
    }
    for (int i = 0; st == MOE_OK && i < m; i++) {
        for (int c = 0; c < cnt[i]; c++) {
            items[n++] = (eplb_item_t){.expert = es[i], .w = in->loads[es[i]] / cnt[i]};
        }
    }
    qsort(items, (size_t)n, sizeof(*items), item_cmp);
    for (int i = 0; st == MOE_OK && i < n; i++) {
        int best = -1, e = items[i].expert;
        for (int j = 0; j < k; j++) {
            int r = rs[j];
            if (used[j] < slots && !out->host[(size_t)r * E + e] &&
                (best < 0 || out->rank_load[r] < out->rank_load[rs[best]])) {
                best = j;
            }
        }
        if (best < 0) {
            st = moe_error_set(err, MOE_ERR_INVALID_ARG, "cannot pack expert %d's copies onto "
                               "distinct ranks with %d slots each; try fewer --redundant or more "
                               "--slots", e, slots);
            break;
        }
        out->host[(size_t)rs[best] * E + e] = 1;
        out->rank_load[rs[best]] += items[i].w;
        used[best]++;
    }
    free(cnt);
    free(used);
    free(items);
    return st;
}

/* Nodes first: experts heaviest first onto the node with the least load per rank that
 * has room (room in proportion to its ranks); extra copies shared out the same way. */
static moe_status_t eplb_nodes(const moe_eplb_in_t *in, int nodes, int *es, int *rs, int slots,
                               moe_eplb_out_t *out, moe_error_t *err)
{
    int E = in->num_experts, n = in->num_ranks;
    int nr[64] = {0}, ne[64] = {0}, rn[64] = {0};
    double nl[64] = {0};
    eplb_item_t *order = calloc((size_t)E, sizeof(*order));
    int *where = calloc((size_t)E, sizeof(int));
    moe_status_t st = order && where ? MOE_OK : MOE_ERR_NO_MEMORY;
    for (int j = 0; j < n; j++) {
        nr[in->node[j]]++;
    }
    for (int e = 0; st == MOE_OK && e < E; e++) {
        order[e] = (eplb_item_t){.expert = e, .w = in->loads[e]};
    }
    if (st == MOE_OK) {
        qsort(order, (size_t)E, sizeof(*order), item_cmp);
    }
    for (int i = 0; st == MOE_OK && i < E; i++) {
        int best = -1;
        for (int d = 0; d < nodes; d++) {
            int cap = (E * nr[d] + n - 1) / n;
            if (nr[d] > 0 && ne[d] < cap && (best < 0 || nl[d] / nr[d] < nl[best] / nr[best])) {
                best = d;
            }
        }
        where[order[i].expert] = best;
        nl[best] += order[i].w;
        ne[best]++;
    }
    /* A node holds its experts' extra copies apart, on its own ranks: at most its experts x
     * (its ranks - 1) of them (a node of one rank, none). */
    int given = 0, room[64] = {0};
    for (int d = 0; d < nodes; d++) {
        room[d] = ne[d] * (nr[d] > 0 ? nr[d] - 1 : 0);
        rn[d] = in->redundant * nr[d] / n;
        rn[d] = rn[d] < room[d] ? rn[d] : room[d];
        given += rn[d];
    }
    while (st == MOE_OK && given < in->redundant) { /* the rest: the most loaded per rank */
        int best = -1;
        for (int d = 0; d < nodes; d++) {
            double a = nr[d] > 0 ? nl[d] / nr[d] / (1 + rn[d]) : -1;
            if (nr[d] > 0 && rn[d] < room[d] &&
                (best < 0 || a > nl[best] / nr[best] / (1 + rn[best]))) {
                best = d;
            }
        }
        if (best < 0) {
            st = moe_error_set(err, MOE_ERR_INVALID_ARG, "%d extra copies: the nodes' ranks "
                               "hold %d apart (a node keeps its experts' copies on its own "
                               "ranks: a node of one rank none)", in->redundant, given);
            break;
        }
        rn[best]++;
        given++;
    }
    for (int d = 0; st == MOE_OK && d < nodes; d++) {
        int m = 0, k = 0;
        for (int e = 0; e < E; e++) {
            es[m] = e;
            m += where[e] == d;
        }
        for (int j = 0; j < n; j++) {
            rs[k] = j;
            k += in->node[j] == d;
        }
        int s = slots > 0 ? slots : (m + rn[d] + k - 1) / (k > 0 ? k : 1);
        if (k > 0) {
            st = eplb_flat(in, es, m, rs, k, rn[d], s, out, err);
        }
    }
    free(order);
    free(where);
    return st;
}

moe_status_t moe_eplb_place(const moe_eplb_in_t *in, moe_eplb_out_t *out, moe_error_t *err)
{
    int E = in->num_experts, n = in->num_ranks, nodes = 1;
    memset(out->host, 0, (size_t)n * (size_t)E);
    memset(out->rank_load, 0, sizeof(double) * (size_t)n);
    for (int j = 0; in->node != NULL && j < n; j++) {
        nodes = in->node[j] + 1 > nodes ? in->node[j] + 1 : nodes;
    }
    if (nodes > 64) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "more than 64 nodes");
    }
    int *es = calloc((size_t)E, sizeof(int)), *rs = calloc((size_t)n, sizeof(int));
    moe_status_t st = es && rs ? MOE_OK : MOE_ERR_NO_MEMORY;
    if (st == MOE_OK && nodes > 1) {
        st = eplb_nodes(in, nodes, es, rs, in->slots, out, err);
    } else if (st == MOE_OK) {
        for (int e = 0; e < E; e++) {
            es[e] = e;
        }
        for (int j = 0; j < n; j++) {
            rs[j] = j;
        }
        int slots = in->slots > 0 ? in->slots : (E + in->redundant + n - 1) / n;
        st = eplb_flat(in, es, E, rs, n, in->redundant, slots, out, err);
    }
    free(es);
    free(rs);
    return st;
}
