/* The placement model: which rank hosts which expert copies, for every layer. A parse
 * resolves placement.experts (`auto` into contiguous blocks) and placement.layers into one
 * sorted replica table (moe_config_t.replicas: set 0 for every layer, set l + 1 for layer
 * l's own map); the layer queries it on every forward (moe_cfg_layer_entries,
 * moe_cfg_experts_of_rank_layer), the online rebalance replaces the per-layer sets
 * (moe_cfg_set_layer_sets). config_int.h lists the part's other files. */
#include "moe_config/config.h"

#include "config/config_int.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Set, expert, rank, then file order: an expert's copies become adjacent, the first
 * written first. */
/* Set, expert, rank, then file order: an expert's copies become adjacent, the first
 * written first. */
int cfg_entry_cmp(const void *pa, const void *pb)
{
    const cfg_entry_t *a = pa, *b = pb;
    if (a->r.set != b->r.set) {
        return a->r.set < b->r.set ? -1 : 1;
    }
    if (a->r.expert != b->r.expert) {
        return a->r.expert < b->r.expert ? -1 : 1;
    }
    if (a->r.rank != b->r.rank) {
        return a->r.rank < b->r.rank ? -1 : 1;
    }
    return cfg_mark_before(a->mark, b->mark) ? -1 : cfg_mark_before(b->mark, a->mark) ? 1 : 0;
}

/* ------------------------------------------------------------------------------------ */
/* Placement                                                                              */
/* ------------------------------------------------------------------------------------ */

/* Contiguous balanced blocks over the hosting ranks in increasing order; the first E % n
 * hosts get one more. In master routing the master only routes, so it hosts none. */
static void placement_auto_blocks(cfg_parse_t *p, int world)
{
    moe_config_t *c = &p->cfg;
    bool skip_master = c->routing == MOE_ROUTING_MASTER;
    int hosts = world - (skip_master ? 1 : 0);
    int ne = (int)c->num_experts;
    if (c->copies != MOE_COPIES_REPLICAS) { /* every expert on every expert rank */
        for (int r = 0; r < world; r++) {
            for (int e = 0; e < ne && !(skip_master && r == c->master_rank); e++) {
                p->ent[p->num_ent++].r = (moe_cfg_replica_t){.set = 0, .expert = (uint16_t)e,
                                                             .rank = r};
            }
        }
        return;
    }
    int base = ne / hosts, extra = ne % hosts;
    int e = 0, h = 0;
    for (int r = 0; r < world; r++) {
        if (skip_master && r == c->master_rank) {
            continue;
        }
        int count = base + (h < extra ? 1 : 0);
        for (int j = 0; j < count && e < ne; j++) {
            p->ent[p->num_ent++].r = (moe_cfg_replica_t){.set = 0, .expert = (uint16_t)e++,
                                                         .rank = r};
        }
        h++;
    }
}

/* Keep the written entries that apply (none with one rank; not set 0 with auto), add the
 * generated ones, sort, and publish them with expert_owner and the per-layer flags. */
void cfg_placement_resolve(cfg_parse_t *p, int world)
{
    moe_config_t *c = &p->cfg;
    int n = 0;
    for (int i = 0; i < p->num_ent; i++) {
        bool keep = world > 1 && (p->ent[i].r.set > 0 || !c->placement_auto);
        if (keep) {
            p->ent[n++] = p->ent[i];
        }
    }
    p->num_ent = n;
    if (world == 1) {
        c->master_rank = 0;
        c->placement_per_layer = false;
        for (int e = 0; e < c->num_experts; e++) { /* moed without mpirun: one rank hosts all */
            p->ent[p->num_ent++].r = (moe_cfg_replica_t){.set = 0, .expert = (uint16_t)e};
        }
    } else if (c->placement_auto) {
        placement_auto_blocks(p, world);
    }
    qsort(p->ent, (size_t)p->num_ent, sizeof(p->ent[0]), cfg_entry_cmp);
    for (int e = 0; e < MOE_MAX_EXPERTS; e++) {
        c->expert_owner[e] = -1;
    }
    memset(c->layer_own, 0, sizeof(c->layer_own));
    c->placement_replicas = false;
    c->num_replicas = p->num_ent;
    for (int i = 0; i < p->num_ent; i++) {
        const moe_cfg_replica_t *x = &p->ent[i].r;
        c->replicas[i] = *x;
        bool again = i > 0 && p->ent[i - 1].r.set == x->set && p->ent[i - 1].r.expert == x->expert;
        c->placement_replicas |= again;
        if (x->set == 0 && !again) {
            c->expert_owner[x->expert] = x->rank;
        }
        if (x->set > 0) {
            c->layer_own[x->set - 1] = 1;
        }
    }
    /* columns: every expert has the same copies (checked after this); expert 0 says how many */
    c->column_shares = 1;
    if (c->copies == MOE_COPIES_COLUMNS && world > 1) {
        c->column_shares = moe_cfg_replicas_of(c, 0, 0, NULL);
    }
}

/* ------------------------------------------------------------------------------------ */
/* Queries: the layer asks them on every forward, the planner and the rebalance too     */
/* ------------------------------------------------------------------------------------ */

/* Entries [*lo, *hi) of placement set `set` (entries are sorted by set). */
static void set_range(const moe_config_t *cfg, int set, int *lo, int *hi)
{
    int a = 0, b = cfg->num_replicas;
    while (a < b) { /* first entry with set >= `set` */
        int m = (a + b) / 2;
        if (cfg->replicas[m].set < set) {
            a = m + 1;
        } else {
            b = m;
        }
    }
    int e = a;
    while (e < cfg->num_replicas && cfg->replicas[e].set == set) {
        e++;
    }
    *lo = a;
    *hi = e;
}

static int layer_set(const moe_config_t *cfg, int layer)
{
    return layer >= 0 && layer < MOE_MAX_LAYER_IDS && cfg->layer_own[layer] ? layer + 1 : 0;
}

const moe_cfg_replica_t *moe_cfg_layer_entries(const moe_config_t *cfg, int layer, int *n)
{
    int lo = 0, hi = 0;
    set_range(cfg, layer_set(cfg, layer), &lo, &hi);
    *n = hi - lo;
    return cfg->replicas + lo;
}

static int experts_of_rank_set(const moe_config_t *cfg, int set, int rank, int32_t *ids)
{
    int lo = 0, hi = 0, count = 0;
    set_range(cfg, set, &lo, &hi);
    for (int i = lo; i < hi; i++) {
        if (cfg->replicas[i].rank == rank) {
            if (ids != NULL) {
                ids[count] = cfg->replicas[i].expert;
            }
            count++;
        }
    }
    return count;
}

int moe_cfg_experts_of_rank(const moe_config_t *cfg, int rank, int32_t *ids)
{
    return cfg != NULL ? experts_of_rank_set(cfg, 0, rank, ids) : 0;
}

int moe_cfg_experts_of_rank_layer(const moe_config_t *cfg, int layer, int rank, int32_t *ids)
{
    return cfg != NULL ? experts_of_rank_set(cfg, layer_set(cfg, layer), rank, ids) : 0;
}

int moe_cfg_local_expert(const moe_config_t *cfg, int layer, int rank, int le)
{
    int lo = 0, hi = 0, count = 0;
    set_range(cfg, layer_set(cfg, layer), &lo, &hi);
    for (int i = lo; i < hi; i++) {
        if (cfg->replicas[i].rank == rank && count++ == le) {
            return cfg->replicas[i].expert;
        }
    }
    return -1;
}

void moe_cfg_tokens_of_rank(const moe_config_t *cfg, int world_size, int rank, int64_t *first,
                            int64_t *count)
{
    int64_t T = cfg->tokens_per_step;
    if (cfg->routing == MOE_ROUTING_MASTER || world_size == 1) {
        int master = world_size == 1 ? 0 : (int)cfg->master_rank;
        *first = 0;
        *count = rank == master ? T : 0;
        return;
    }
    int64_t base = T / world_size, rem = T % world_size;
    *first = rank * base + (rank < rem ? rank : rem);
    *count = base + (rank < rem ? 1 : 0);
}

int moe_cfg_max_local(const moe_config_t *cfg, int rank)
{
    int most = moe_cfg_experts_of_rank(cfg, rank, NULL);
    for (int l = 0; cfg != NULL && cfg->placement_per_layer && l < cfg->num_layers &&
                    l < MOE_MAX_LAYER_IDS; l++) {
        int n = cfg->layer_own[l] ? experts_of_rank_set(cfg, l + 1, rank, NULL) : 0;
        most = n > most ? n : most;
    }
    return most;
}

int moe_cfg_replicas_of(const moe_config_t *cfg, int layer, int expert, int32_t *ranks)
{
    int n = 0, count = 0;
    const moe_cfg_replica_t *x = moe_cfg_layer_entries(cfg, layer, &n);
    for (int i = 0; i < n; i++) {
        if (x[i].expert == expert) {
            if (ranks != NULL) {
                ranks[count] = x[i].rank;
            }
            count++;
        }
    }
    return count;
}

void moe_cfg_share_counts(int64_t ffn, int64_t block, char *buf, size_t n)
{
    size_t at = 0;
    int64_t blocks = block > 0 && ffn % block == 0 ? ffn / block : 0;
    for (int64_t c = 2; c <= blocks && c <= MOE_MAX_RANKS && at < n; c++) {
        if (blocks % c == 0) {
            int w = snprintf(buf + at, n - at, "%s%lld", at > 0 ? ", " : "", (long long)c);
            at = w > 0 ? at + (size_t)w : at;
        }
    }
}

int64_t moe_cfg_column_first(const moe_config_t *cfg, int layer, int expert, int rank)
{
    if (cfg->column_shares <= 1) {
        return 0;
    }
    int32_t ranks[MOE_MAX_RANKS];
    int n = moe_cfg_replicas_of(cfg, layer, expert, ranks);
    for (int i = 0; i < n; i++) {
        if (ranks[i] == rank) {
            return (int64_t)i * moe_cfg_expert_ffn(cfg);
        }
    }
    return 0;
}

bool moe_cfg_rank_profiled(const moe_config_t *cfg, int rank)
{
    if (cfg == NULL || rank < 0 || (cfg->world_size > 0 && rank >= cfg->world_size)) {
        return false;
    }
    if (cfg->prof_all_ranks) {
        return true;
    }
    int n = cfg->prof_num_ranks < MOE_MAX_RANKS ? cfg->prof_num_ranks : MOE_MAX_RANKS;
    for (int i = 0; i < n; i++) {
        if (cfg->prof_ranks[i] == rank) {
            return true;
        }
    }
    return false;
}

int moe_cfg_expert_ranks(const moe_config_t *cfg, int world, int32_t *ranks)
{
    bool skip_master = cfg->routing == MOE_ROUTING_MASTER && world > 1;
    int n = 0;
    for (int r = 0; r < world; r++) {
        if (!(skip_master && r == cfg->master_rank)) {
            if (ranks != NULL) {
                ranks[n] = r;
            }
            n++;
        }
    }
    return n;
}

int moe_cfg_rebalance_slots(const moe_config_t *cfg, int world)
{
    int64_t n = moe_cfg_expert_ranks(cfg, world, NULL);
    return n > 0 ? (int)((cfg->num_experts + cfg->redundant_experts + n - 1) / n) : 0;
}

int moe_cfg_replica_cmp(const void *pa, const void *pb)
{
    const moe_cfg_replica_t *a = pa, *b = pb;
    if (a->set != b->set) {
        return a->set < b->set ? -1 : 1;
    }
    if (a->expert != b->expert) {
        return a->expert < b->expert ? -1 : 1;
    }
    return a->rank < b->rank ? -1 : a->rank > b->rank ? 1 : 0;
}

moe_status_t moe_cfg_set_layer_sets(moe_config_t *cfg, const moe_cfg_replica_t *entries, int n,
                                    moe_error_t *err)
{
    int lo = 0, hi = 0;
    set_range(cfg, 0, &lo, &hi); /* set 0 sorts first: it stays where it is */
    if (hi + n > MOE_MAX_REPLICA_ENTRIES) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "the new placement has %d entries, the "
                             "table holds %d", hi + n, MOE_MAX_REPLICA_ENTRIES);
    }
    memcpy(cfg->replicas + hi, entries, sizeof(*entries) * (size_t)n);
    qsort(cfg->replicas + hi, (size_t)n, sizeof(*entries), moe_cfg_replica_cmp);
    cfg->num_replicas = hi + n;
    memset(cfg->layer_own, 0, sizeof(cfg->layer_own));
    cfg->placement_replicas = false;
    for (int i = 0; i < cfg->num_replicas; i++) {
        const moe_cfg_replica_t *x = &cfg->replicas[i];
        cfg->placement_replicas |= i > 0 && cfg->replicas[i - 1].set == x->set &&
                                   cfg->replicas[i - 1].expert == x->expert;
        if (x->set > 0 && x->set <= MOE_MAX_LAYER_IDS) {
            cfg->layer_own[x->set - 1] = 1;
        }
    }
    cfg->placement_per_layer = n > 0;
    return MOE_OK;
}
