/* `moed plan --routing` and `moed plan --check` on traces written here with the writer API:
 * the prediction a plan writes (before: the base config's placement; after: the plan's)
 * equals, token for token, what the runtime's own dispatch plan (runtime/src/layer/plan.c,
 * moe_plan_build_slots) sends each rank for the same rows in steps, with replicas, capacity
 * limits and a trace that does not fill its last step; the bases (--config, a folder's
 * config.yaml, a moed report's summary.json) and every refusal; --check on a report whose
 * rows are (or are not) what was predicted. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "layer/plan.h"
#include "moe_config/config.h"
#include "moe_model/routing_trace.h"
#include "moe_prof/prof.h"
#include "test_util.h"

static char root[256];

/* ---- inputs ---------------------------------------------------------------------- */

static uint64_t rng = 88172645463325252ull;

static uint32_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

/* The family write_trace writes ("": none, as an import not told the model). */
static const char *trace_family = "";

/* A trace of the given ids (ids[l]: rows x k), uniform weights in ws[l]. */
static void write_trace_ids(const char *path, int L, const int32_t *lids, int E, int k,
                            int64_t rows, int64_t step, int32_t *const *ids, float *const *ws)
{
    moe_routing_out_t o = {.num_layers = L, .layer_ids = lids, .num_experts = E, .top_k = k,
                           .rows = rows, .tokens_per_step = step, .family = trace_family,
                           .source = "test_plan_routing", .uniform_weights = true,
                           .ids = (const int32_t *const *)ids, .weights = (const float *const *)ws};
    moe_error_t err = {0};
    CHECK(moe_routing_trace_write(path, &o, &err) == MOE_OK);
}

/* A trace of `rows` tokens, top-k of E experts, for decoder layers `lids`: in each layer one
 * hot expert (a different one per layer) is the first choice of most tokens in the first
 * half of each step of `step` tokens and of few in the second half, so how a replicated
 * expert's rows split between its copies depends on where in the step they are. */
static void write_trace(const char *path, int L, const int32_t *lids, int E, int k, int64_t rows,
                        int64_t step)
{
    int32_t **ids = calloc((size_t)L, sizeof(*ids));
    float **ws = calloc((size_t)L, sizeof(*ws));
    for (int l = 0; l < L; l++) {
        ids[l] = calloc((size_t)(rows * k), sizeof(int32_t));
        ws[l] = calloc((size_t)(rows * k), sizeof(float));
        for (int64_t r = 0; r < rows; r++) {
            int32_t *row = ids[l] + r * k;
            bool early = r % step < step / 2;
            for (int c = 0; c < k; c++) {
                int e;
                bool dup;
                do {
                    e = c == 0 && next_rand() % 10 < (early ? 9u : 2u) ? (3 * l + 1) % E
                                                                      : (int)(next_rand() % E);
                    dup = false;
                    for (int j = 0; j < c; j++) {
                        dup |= row[j] == e;
                    }
                } while (dup);
                row[c] = e;
                ws[l][r * k + c] = 1.0f / (float)k;
            }
        }
    }
    write_trace_ids(path, L, lids, E, k, rows, step, ids, ws);
    for (int l = 0; l < L; l++) {
        free(ids[l]);
        free(ws[l]);
    }
    free(ids);
    free(ws);
}

typedef struct base {
    int E, k, L, tokens, first_layer;
    double capacity;
    const char *routing, *placement, *extra;
} base_t;

static void write_base(const char *path, const base_t *b)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f == NULL) {
        return;
    }
    fprintf(f, "model:\n  hidden_dim: 64\n  ffn_dim: 128\n  num_experts: %d\n  top_k: %d\n"
            "  num_layers: %d\n  first_layer: %d\n  capacity_factor: %g\n  seed: 7\n"
            "placement:\n  master_rank: 0\n  experts: %s\nruntime:\n  routing: %s\n"
            "workload:\n  tokens_per_step: %d\n  steps: 5\n%s", b->E, b->k, b->L, b->first_layer,
            b->capacity, b->placement, b->routing, b->tokens, b->extra ? b->extra : "");
    fclose(f);
}

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = calloc((size_t)n + 1, 1);
    if (s != NULL && fread(s, 1, (size_t)n, f) != (size_t)n) {
        s[0] = '\0';
    }
    fclose(f);
    return s;
}

/* `moed plan ARGS` with its stdout and stderr into *out and *errs (malloc'd). */
static int run_plan(char **out, char **errs, int argc, const char **argv)
{
    char epath[512];
    snprintf(epath, sizeof(epath), "%s/stderr.txt", root);
    size_t len = 0;
    *out = NULL;
    FILE *o = open_memstream(out, &len);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    FILE *e = freopen(epath, "w", stderr);
    int rc = o != NULL && e != NULL ? moe_prof_plan_main(argc, (char **)argv, o) : -99;
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    if (o != NULL) {
        fclose(o);
    }
    *errs = read_all(epath);
    return rc;
}

/* ---- what the runtime does --------------------------------------------------------- */

typedef struct loads {
    int64_t max, total;
    int hosts;
} loads_t;

static int64_t rank_rows[64];

/* Tokens per rank of moed layer l of `cfg` for the trace's rows, by the runtime's dispatch
 * plan itself: one moe_plan_build_slots per step of cfg->tokens_per_step rows (cycling),
 * the rows sent to each rank summed; the max and the mean over the ranks holding experts. */
static loads_t runtime_loads(const moe_config_t *cfg, const moe_routing_trace_t *tr, int l)
{
    int E = (int)cfg->num_experts, k = (int)cfg->top_k, W = cfg->world_size, n = 0;
    int64_t T = cfg->tokens_per_step, steps = (tr->rows + T - 1) / T;
    int li = moe_routing_trace_layer(tr, cfg->layer_ids[l]);
    const moe_cfg_replica_t *slots = moe_cfg_layer_entries(cfg, l, &n);
    moe_plan_t plan;
    moe_arena_t sizing = {0};
    moe_plan_carve(&plan, W, E, k, T, n, &sizing);
    moe_arena_t arena = {.base = calloc(1, moe_arena_size(&sizing))};
    moe_plan_carve(&plan, W, E, k, T, n, &arena);
    int32_t *topk = calloc((size_t)(T * k), sizeof(int32_t));
    int64_t cap = moe_plan_capacity(cfg->capacity_factor, T, k, E);
    memset(rank_rows, 0, sizeof(rank_rows));
    for (int64_t s = 0; s < steps; s++) {
        for (int64_t g = 0; g < T; g++) {
            memcpy(topk + g * k, moe_routing_trace_ids(tr, li, (s * T + g) % tr->rows),
                   sizeof(int32_t) * (size_t)k);
        }
        moe_plan_count_demand(&plan, topk, T);
        moe_plan_build_slots(&plan, topk, NULL, T, slots, n, 0, T, cap, cap > 0 ? (int32_t[64]){0}
                                                                          : NULL);
        for (int r = 0; r < W; r++) {
            rank_rows[r] += plan.send_rows[r];
        }
    }
    loads_t x = {0};
    for (int r = 0; r < W; r++) {
        if (moe_cfg_experts_of_rank_layer(cfg, l, r, NULL) > 0) {
            x.max = rank_rows[r] > x.max ? rank_rows[r] : x.max;
            x.total += rank_rows[r];
            x.hosts++;
        }
    }
    free(topk);
    free(arena.base);
    return x;
}

/* The prediction line of layer l in a planned config. */
static bool pred_line(const char *yaml, int l, loads_t *before, loads_t *after)
{
    char key[32];
    snprintf(key, sizeof(key), "#   layer %d: before", l);
    const char *s = strstr(yaml, key);
    double rb, ra, mb, ma;
    int64_t xb, xa, t;
    int hb, ha;
    if (s == NULL || sscanf(s, "#   layer %*d: before %lf (max %" SCNd64 " / mean %lf on %d "
                            "ranks), after %lf (max %" SCNd64 " / mean %lf on %d ranks); %"
                            SCNd64 " in all", &rb, &xb, &mb, &hb, &ra, &xa, &ma, &ha, &t) != 9) {
        return false;
    }
    *before = (loads_t){.max = xb, .total = (int64_t)llround(mb * hb), .hosts = hb};
    *after = (loads_t){.max = xa, .total = t, .hosts = ha};
    CHECK_NEAR(rb, (double)xb / mb, 1e-3);
    CHECK_NEAR(ra, (double)xa * ha / (double)t, 1e-3);
    return true;
}

static moe_config_t *parse_file(const char *path, int world)
{
    moe_config_t *c = calloc(1, sizeof(*c));
    char *text = read_all(path);
    moe_error_t err = {0};
    CHECK(text != NULL);
    if (text == NULL || moe_cfg_parse(text, strlen(text), path, world, c, &err) != MOE_OK) {
        fprintf(stderr, "parse %s: %s\n", path, err.msg);
        CHECK(false);
        free(c);
        c = NULL;
    }
    free(text);
    return c;
}

/* Every layer of a plan's prediction, before and after, against the runtime's rows; how
 * many layers' exact max differs from an even split of each expert's tokens over its copies
 * into *uneven (the even split is what a plan without the runtime's rule would say). */
static void check_exact(const char *base, const char *planned, const char *trace, int N,
                        int *uneven)
{
    moe_config_t *b = parse_file(base, N), *a = parse_file(planned, N);
    char *yaml = read_all(planned);
    moe_routing_trace_t tr;
    moe_error_t err = {0};
    CHECK(moe_routing_trace_open(trace, true, &tr, &err) == MOE_OK);
    *uneven = 0;
    for (int l = 0; a != NULL && b != NULL && yaml != NULL && l < a->num_layers; l++) {
        loads_t pb, pa;
        CHECK(pred_line(yaml, l, &pb, &pa));
        loads_t rb = runtime_loads(b, &tr, l), ra = runtime_loads(a, &tr, l);
        CHECK_INT_EQ(pb.max, rb.max);
        CHECK_INT_EQ(pb.total, rb.total);
        CHECK_INT_EQ(pb.hosts, rb.hosts);
        CHECK_INT_EQ(pa.max, ra.max);
        CHECK_INT_EQ(pa.total, ra.total);
        CHECK_INT_EQ(pa.hosts, ra.hosts);
        /* the even split: each expert's kept rows / its copies */
        double even[64] = {0};
        int64_t kept[64] = {0};
        int64_t T = a->tokens_per_step, steps = (tr.rows + T - 1) / T;
        int li = moe_routing_trace_layer(&tr, a->layer_ids[l]);
        moe_routing_trace_counts(&tr, li, 0, steps * T, kept);
        int n = 0;
        const moe_cfg_replica_t *en = moe_cfg_layer_entries(a, l, &n);
        for (int i = 0; i < n; i++) {
            even[en[i].rank] += (double)kept[en[i].expert] /
                                moe_cfg_replicas_of(a, l, en[i].expert, NULL);
        }
        double emax = 0;
        for (int r = 0; r < a->world_size; r++) {
            emax = even[r] > emax ? even[r] : emax;
        }
        *uneven += fabs(emax - (double)ra.max) > 0.5 ? 1 : 0;
    }
    moe_routing_trace_free(&tr);
    free(yaml);
    free(a);
    free(b);
}

/* ---- the cases ------------------------------------------------------------------- */

static void path_of(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", root, name);
}

/* Master routing, no replicas, no capacity: 8 experts on ranks 1 and 2 in blocks. */
static void test_plain(void)
{
    char trace[512], base[512], out[512];
    path_of(trace, sizeof(trace), "plain.safetensors");
    path_of(base, sizeof(base), "plain_base.yaml");
    path_of(out, sizeof(out), "plain_out.yaml");
    const int32_t lids[2] = {0, 1};
    write_trace(trace, 2, lids, 8, 2, 160, 32);
    write_base(base, &(base_t){.E = 8, .k = 2, .L = 2, .tokens = 32, .routing = "master",
                               .placement = "{1: [0, 1, 2, 3], 2: [4, 5, 6, 7]}"});
    char *o = NULL, *e = NULL;
    const char *argv[] = {"--routing", trace, "--ranks", "3", "--config", base, "-o", out};
    CHECK_INT_EQ(run_plan(&o, &e, 8, argv), 0);
    CHECK_STR_CONTAINS(o, "moed plan: 8 experts x 2 layers onto 2 expert ranks of 3");
    CHECK_STR_CONTAINS(o, "the trace's 160 tokens in 5 steps of 32");
    CHECK_STR_CONTAINS(o, "  overall    before ");
    int uneven = 0;
    check_exact(base, out, trace, 3, &uneven);
    char *yaml = read_all(out);
    CHECK_STR_CONTAINS(yaml, "# moed plan --routing ");
    CHECK_STR_CONTAINS(yaml, "# base config: ");
    CHECK_STR_CONTAINS(yaml, "  tokens_per_step: 32\n");
    /* the skew: rank 1 holds layer 0's hot expert 1; the plan is better, never worse */
    loads_t b0, a0;
    CHECK(pred_line(yaml, 0, &b0, &a0));
    CHECK(a0.max < b0.max);
    free(yaml);
    free(o);
    free(e);
}

/* Under a capacity limit the packing weighs each expert by its kept choices, not its demand:
 * 4 experts, top-1, 8 tokens a step choosing 0 0 0 0 1 1 2 3, capacity ceil(8 / 4) = 2, 4
 * slots a rank (the default 2 would force two experts a rank). By demand (4, 2, 1, 1)
 * expert 0 is packed alone and 1, 2, 3 together: kept 2 against 4, max / mean 4 / 3. By kept
 * (2, 2, 1, 1): 0 + 2 against 1 + 3, 3 against 3, 1.000. */
static void test_capacity_kept_loads(void)
{
    char trace[512], base[512], out[512];
    path_of(trace, sizeof(trace), "capk.safetensors");
    path_of(base, sizeof(base), "capk_base.yaml");
    path_of(out, sizeof(out), "capk_out.yaml");
    enum { STEPS = 4, T = 8 };
    static const int32_t step_ids[T] = {0, 0, 0, 0, 1, 1, 2, 3};
    int32_t ids[STEPS * T];
    float ws[STEPS * T];
    for (int i = 0; i < STEPS * T; i++) {
        ids[i] = step_ids[i % T];
        ws[i] = 1.0f;
    }
    const int32_t lids[1] = {0};
    int32_t *idp[1] = {ids};
    float *wsp[1] = {ws};
    write_trace_ids(trace, 1, lids, 4, 1, STEPS * T, T, idp, wsp);
    write_base(base, &(base_t){.E = 4, .k = 1, .L = 1, .tokens = T, .capacity = 1.0,
                               .routing = "master", .placement = "auto"});
    char *po = NULL, *pe = NULL;
    const char *argv[] = {"--routing", trace, "--ranks", "3", "--slots", "4", "--config", base,
                          "-o", out};
    CHECK_INT_EQ(run_plan(&po, &pe, 10, argv), 0);
    CHECK_STR_CONTAINS(po, "capacity 2 per expert and step");
    CHECK_STR_CONTAINS(po, "after 1.000");
    int uneven = 0;
    check_exact(base, out, trace, 3, &uneven);
    free(po);
    free(pe);
}

/* Replicas: the runtime splits a replicated expert's rows by the token's place in the step,
 * not evenly; the prediction follows the runtime exactly, which an even split would not. */
static void test_replicas(void)
{
    char trace[512], base[512], out[512];
    path_of(trace, sizeof(trace), "rep.safetensors");
    path_of(base, sizeof(base), "rep_base.yaml");
    path_of(out, sizeof(out), "rep_out.yaml");
    const int32_t lids[3] = {0, 1, 2};
    write_trace(trace, 3, lids, 8, 2, 320, 64);
    write_base(base, &(base_t){.E = 8, .k = 2, .L = 3, .tokens = 64, .routing = "master",
                               .placement = "auto"});
    char *o = NULL, *e = NULL;
    const char *argv[] = {"--routing", trace, "--ranks", "4", "--redundant", "3", "--config",
                          base, "-o", out};
    CHECK_INT_EQ(run_plan(&o, &e, 10, argv), 0);
    moe_config_t *a = parse_file(out, 4);
    CHECK(a != NULL && a->placement_replicas);
    free(a);
    int uneven = 0;
    check_exact(base, out, trace, 4, &uneven);
    CHECK(uneven > 0); /* the rule matters here: an even split predicts another max */
    free(o);
    free(e);
}

/* Capacity limits, symmetric routing, decoder layers 5 and 6 (model.first_layer), and a
 * trace whose rows do not fill the last step (a replay cycles: so does the prediction). */
static void test_capacity_cycle(void)
{
    char trace[512], base[512], out[512];
    path_of(trace, sizeof(trace), "cap.safetensors");
    path_of(base, sizeof(base), "cap_base.yaml");
    path_of(out, sizeof(out), "cap_out.yaml");
    const int32_t lids[3] = {4, 5, 6};
    write_trace(trace, 3, lids, 8, 2, 5 * 48 + 17, 48);
    write_base(base, &(base_t){.E = 8, .k = 2, .L = 2, .first_layer = 5, .tokens = 48,
                               .capacity = 1.0, .routing = "symmetric", .placement = "auto"});
    char *o = NULL, *e = NULL;
    const char *argv[] = {"--routing", trace, "--ranks", "3", "--redundant", "2", "--config",
                          base, "-o", out};
    CHECK_INT_EQ(run_plan(&o, &e, 10, argv), 0);
    CHECK_STR_CONTAINS(o, "in 6 steps of 48 (workload.tokens_per_step), the last step filled");
    CHECK_STR_CONTAINS(o, "capacity 12 per expert and step");
    char *yaml = read_all(out);
    CHECK_STR_CONTAINS(yaml, "  first_layer: 5\n");
    free(yaml);
    int uneven = 0;
    check_exact(base, out, trace, 3, &uneven);
    free(o);
    free(e);
}

/* model.layers naming other decoder layers than first_layer.. would: the planned config
 * keeps model.layers (and drops first_layer, which the config refuses beside it). */
static void test_layers_kept(void)
{
    char trace[512], base[512], out[512];
    path_of(trace, sizeof(trace), "picked.safetensors");
    path_of(base, sizeof(base), "picked_base.yaml");
    path_of(out, sizeof(out), "picked_out.yaml");
    const int32_t lids[2] = {3, 7};
    write_trace(trace, 2, lids, 4, 1, 64, 16);
    FILE *f = fopen(base, "w");
    if (f != NULL) {
        fputs("model: {hidden_dim: 32, ffn_dim: 64, num_experts: 4, top_k: 1, layers: [3, 7]}\n"
              "workload: {tokens_per_step: 16}\n", f);
        fclose(f);
    }
    char *o = NULL, *e = NULL;
    const char *argv[] = {"--routing", trace, "--ranks", "3", "--config", base, "-o", out};
    CHECK_INT_EQ(run_plan(&o, &e, 8, argv), 0);
    char *yaml = read_all(out);
    CHECK_STR_CONTAINS(yaml, "  layers: [3, 7]\n");
    CHECK(yaml != NULL && strstr(yaml, "  first_layer:") == NULL);
    int uneven = 0;
    check_exact(base, out, trace, 3, &uneven);
    free(yaml);
    free(o);
    free(e);
}

/* The base from the trace's folder: a config.yaml beside routing.safetensors; -o defaults
 * to FOLDER/planned.yaml. */
static void test_folder_base(void)
{
    char dir[400], trace[512], base[512], out[512];
    path_of(dir, sizeof(dir), "folder");
    mkdir(dir, 0700);
    snprintf(trace, sizeof(trace), "%s/%s", dir, MOE_ROUTING_FILE);
    snprintf(base, sizeof(base), "%s/config.yaml", dir);
    snprintf(out, sizeof(out), "%s/planned.yaml", dir);
    const int32_t lids[2] = {0, 1};
    write_trace(trace, 2, lids, 8, 2, 96, 32);
    write_base(base, &(base_t){.E = 8, .k = 2, .L = 2, .tokens = 32, .routing = "master",
                               .placement = "auto"});
    char *o = NULL, *e = NULL;
    const char *argv[] = {"--routing", dir, "--ranks", "3", "--redundant", "1"};
    CHECK_INT_EQ(run_plan(&o, &e, 6, argv), 0);
    CHECK_STR_CONTAINS(o, "config.yaml");
    CHECK_STR_CONTAINS(o, "config: ");
    int uneven = 0;
    check_exact(base, out, trace, 3, &uneven);
    free(o);
    free(e);
    /* a second time: planned.yaml exists, not replaced without --force */
    CHECK_INT_EQ(run_plan(&o, &e, 6, argv), 2);
    CHECK_STR_CONTAINS(e, "planned.yaml exists (a config of this model): not replacing it");
    free(o);
    free(e);
    /* the folder written with a trailing slash: one slash before planned.yaml */
    char slashed[404], want[560];
    snprintf(slashed, sizeof(slashed), "%s/", dir);
    argv[1] = slashed;
    snprintf(want, sizeof(want), "%s exists (a config of this model)", out);
    CHECK_INT_EQ(run_plan(&o, &e, 6, argv), 2);
    CHECK_STR_CONTAINS(e, want);
    free(o);
    free(e);
}

/* Refusals: exit 2, one message naming both sides, nothing written. */
static void refuses(int argc, const char **argv, const char *want, const char *out)
{
    char *o = NULL, *e = NULL;
    CHECK_INT_EQ(run_plan(&o, &e, argc, argv), 2);
    CHECK_STR_CONTAINS(e, want);
    CHECK(o != NULL && o[0] == '\0');
    struct stat sb;
    CHECK(out == NULL || stat(out, &sb) != 0);
    free(o);
    free(e);
}

static void test_refusals(void)
{
    char trace[512], base[512], other[512], out[512], lone[400], lone_trace[512];
    path_of(trace, sizeof(trace), "ref.safetensors");
    path_of(base, sizeof(base), "ref_base.yaml");
    path_of(other, sizeof(other), "ref_other.yaml");
    path_of(out, sizeof(out), "ref_out.yaml");
    path_of(lone, sizeof(lone), "lone");
    const int32_t lids[2] = {0, 1};
    write_trace(trace, 2, lids, 8, 2, 64, 32);
    write_base(base, &(base_t){.E = 16, .k = 2, .L = 2, .tokens = 32, .routing = "master",
                               .placement = "auto"});
    const char *a1[] = {"--routing", trace, "--ranks", "3", "--config", base, "-o", out};
    refuses(8, a1, "the trace is of 8 experts, top_k 2; the base config", out);
    refuses(8, a1, "has 16 experts, top_k 2: they must be the same", out);
    write_base(other, &(base_t){.E = 8, .k = 2, .L = 3, .tokens = 32, .routing = "master",
                                .placement = "auto"});
    const char *a2[] = {"--routing", trace, "--ranks", "3", "--config", other, "-o", out};
    refuses(8, a2, "the trace has no decoder layer 2, the base config", out);
    refuses(8, a2, "(the trace's layers: [0, 1]; the config's: [0, 1, 2])", out);
    write_base(other, &(base_t){.E = 8, .k = 2, .L = 2, .tokens = 128, .routing = "master",
                                .placement = "auto"});
    refuses(8, a2, "the trace has 64 rows, fewer than one step of the base config", out);
    /* a trace of another family: its replay would refuse it, so the plan does */
    trace_family = "deepseek_v3";
    write_trace(trace, 2, lids, 8, 2, 64, 32);
    trace_family = "";
    write_base(other, &(base_t){.E = 8, .k = 2, .L = 2, .tokens = 32, .routing = "master",
                                .placement = "auto"});
    refuses(8, a2, "the trace is of a deepseek_v3 model; the base config", out);
    refuses(8, a2, "is model.family mixtral: its replay would refuse the trace", out);
    write_trace(trace, 2, lids, 8, 2, 64, 32);
    /* no base: a trace has no model shape */
    mkdir(lone, 0700);
    snprintf(lone_trace, sizeof(lone_trace), "%s/%s", lone, MOE_ROUTING_FILE);
    write_trace(lone_trace, 2, lids, 8, 2, 64, 32);
    const char *a3[] = {"--routing", lone, "--ranks", "3"};
    refuses(4, a3, "a trace has no model shape: name the model's config with --config BASE.yaml",
            NULL);
    const char *a4[] = {"--routing", lone_trace, "--ranks", "3", "--config", base};
    refuses(6, a4, "-o FILE is required with --routing naming a file", NULL);
    const char *a5[] = {"--routing", out, "--ranks", "3", "--config", base, "-o", out};
    refuses(8, a5, "ref_out.yaml", out); /* no such trace */
    /* no such trace and no -o: the path is what is wrong, not the missing -o */
    const char *a9[] = {"--routing", out, "--ranks", "3", "--config", base};
    refuses(6, a9, "ref_out.yaml: cannot read the routing trace", out);
    const char *a6[] = {"--config", base, "--ranks", "3", "somewhere"};
    refuses(5, a6, "--config BASE.yaml goes with --routing PATH", NULL);
    const char *a7[] = {"--routing", trace, "somewhere", "--ranks", "3"};
    refuses(5, a7, "a report folder or --routing PATH, not both", NULL);
    const char *a8[] = {"--check", root, "--ranks", "3"};
    refuses(4, a8, "--check RUN_DIR takes no other option", NULL);
}

/* ---- --check ---------------------------------------------------------------------- */

/* A report folder of a run of `planned` over `passes` passes of the trace: config.yaml the
 * planned text, summary.json's experts[] and replicas[] rows the runtime's rows per copy
 * (moe_plan_build_slots' slot_kept); in layer 1, `bump` 1: a token more on one copy, 2: a
 * token of another rank's copy moved onto the busiest rank's. */
static void tamper(const moe_cfg_replica_t *slots, int n, int64_t *slot_rows, int bump)
{
    int64_t per_rank[64] = {0};
    int busiest = 0, from = -1, to = -1;
    for (int i = 0; i < n; i++) {
        per_rank[slots[i].rank] += slot_rows[i];
    }
    for (int r = 0; r < 64; r++) {
        busiest = per_rank[r] > per_rank[busiest] ? r : busiest;
    }
    for (int i = 0; i < n; i++) {
        to = slots[i].rank == busiest ? i : to;
        from = slots[i].rank != busiest && slot_rows[i] > 0 ? i : from;
    }
    CHECK(to >= 0 && from >= 0);
    if (to >= 0 && from >= 0) {
        slot_rows[to]++;
        slot_rows[from] -= bump == 2 ? 1 : 0;
    }
}

static bool show_keys; /* write_run: layers[].routing.hottest_share, entropy_bits too */

static void write_run(const char *dir, const char *planned, const char *trace, int N,
                      int passes, int bump)
{
    mkdir(dir, 0700);
    char path[600];
    char *yaml = read_all(planned);
    snprintf(path, sizeof(path), "%s/config.yaml", dir);
    FILE *f = fopen(path, "w");
    if (f != NULL && yaml != NULL) {
        fputs(yaml, f);
    }
    if (f != NULL) {
        fclose(f);
    }
    free(yaml);
    moe_config_t *c = parse_file(planned, N);
    moe_routing_trace_t tr;
    moe_error_t err = {0};
    CHECK(moe_routing_trace_open(trace, true, &tr, &err) == MOE_OK);
    if (c == NULL) {
        return;
    }
    int E = (int)c->num_experts, k = (int)c->top_k;
    int64_t T = c->tokens_per_step, steps = (tr.rows + T - 1) / T;
    json_t *doc = json_pack("{s:s, s:i, s:{s:i, s:i, s:i, s:i, s:i}}", "schema", "moed.summary",
                            "schema_version", 1, "run", "world_size", N, "num_experts", E,
                            "num_layers", (int)c->num_layers, "recorded_steps",
                            (int)(steps * passes), "tokens_per_step", (int)T);
    json_t *experts = json_array(), *replicas = json_array(), *layers = json_array();
    for (int l = 0; l < c->num_layers; l++) {
        int n = 0;
        const moe_cfg_replica_t *slots = moe_cfg_layer_entries(c, l, &n);
        int li = moe_routing_trace_layer(&tr, c->layer_ids[l]);
        moe_plan_t plan;
        moe_arena_t sizing = {0};
        moe_plan_carve(&plan, N, E, k, T, n, &sizing);
        moe_arena_t arena = {.base = calloc(1, moe_arena_size(&sizing))};
        moe_plan_carve(&plan, N, E, k, T, n, &arena);
        int32_t *topk = calloc((size_t)(T * k), sizeof(int32_t));
        int64_t *slot_rows = calloc((size_t)n, sizeof(int64_t));
        int64_t cap = moe_plan_capacity(c->capacity_factor, T, k, E), kept[64] = {0};
        for (int64_t s = 0; s < steps * passes; s++) {
            for (int64_t g = 0; g < T; g++) {
                int64_t row = ((s % steps) * T + g) % tr.rows;
                memcpy(topk + g * k, moe_routing_trace_ids(&tr, li, row),
                       sizeof(int32_t) * (size_t)k);
            }
            moe_plan_count_demand(&plan, topk, T);
            moe_plan_build_slots(&plan, topk, NULL, T, slots, n, 0, T, cap,
                                 cap > 0 ? (int32_t[64]){0} : NULL);
            for (int i = 0; i < n; i++) {
                slot_rows[i] += plan.slot_kept[i];
            }
            for (int e = 0; e < E; e++) {
                kept[e] += plan.expert_kept[e];
            }
        }
        if (l == 1 && bump > 0) {
            tamper(slots, n, slot_rows, bump);
        }
        int64_t demand[64];
        json_t *d = json_array();
        moe_routing_trace_counts(&tr, li, 0, steps * T, demand);
        for (int e = 0; e < E; e++) {
            json_array_append_new(d, json_integer(demand[e] * passes));
        }
        json_t *kd = json_array();
        for (int e = 0; e < E; e++) {
            json_array_append_new(kd, json_integer(kept[e]));
        }
        json_t *lrow = json_pack("{s:i, s:o, s:o}", "layer", l, "demand", d, "kept", kd);
        if (show_keys) { /* what a newer summary.json carries per layer */
            json_object_set_new(lrow, "routing", json_pack("{s:f, s:f}", "hottest_share",
                                                           0.5 + 0.25 * l, "entropy_bits", 1.5));
        }
        json_array_append_new(layers, lrow);
        for (int i = 0; i < n; i++) {
            int e = slots[i].expert, copies = moe_cfg_replicas_of(c, l, e, NULL);
            json_t *row = json_pack("{s:i, s:i, s:i, s:I, s:I, s:{s:f}}", "layer", l, "expert", e,
                                    "rank", slots[i].rank, "tokens", (json_int_t)slot_rows[i],
                                    "calls", (json_int_t)(steps * passes), "latency_ms", "mean",
                                    0.01 * (double)slot_rows[i] / (double)(steps * passes));
            if (copies > 1) {
                json_object_set_new(row, "busy_ms", json_real(0.01 * (double)slot_rows[i]));
                json_array_append_new(replicas, row);
                if (i == 0 || slots[i - 1].expert != e) {
                    json_array_append_new(experts, json_pack("{s:i, s:i, s:i, s:I}", "layer", l,
                                                             "expert", e, "rank", slots[i].rank,
                                                             "tokens", (json_int_t)0));
                }
            } else {
                json_array_append_new(experts, row);
            }
        }
        free(topk);
        free(slot_rows);
        free(arena.base);
    }
    json_object_set_new(doc, "experts", experts);
    json_object_set_new(doc, "replicas", replicas);
    json_object_set_new(doc, "layers", layers);
    json_object_set_new(doc, "routing", json_pack("{s:s, s:s, s:s}", "source", "replayed",
                                                  "detail", "replayed test trace", "file",
                                                  trace));
    snprintf(path, sizeof(path), "%s/summary.json", dir);
    CHECK(json_dump_file(doc, path, JSON_INDENT(1)) == 0);
    json_decref(doc);
    moe_routing_trace_free(&tr);
    free(c);
}

static void test_check(void)
{
    char trace[512], base[512], out[512], run[512];
    path_of(trace, sizeof(trace), "chk.safetensors");
    path_of(base, sizeof(base), "chk_base.yaml");
    path_of(out, sizeof(out), "chk_out.yaml");
    const int32_t lids[2] = {0, 1};
    write_trace(trace, 2, lids, 8, 2, 192, 64);
    write_base(base, &(base_t){.E = 8, .k = 2, .L = 2, .tokens = 64, .routing = "master",
                               .placement = "auto"});
    char *o = NULL, *e = NULL;
    const char *argv[] = {"--routing", trace, "--ranks", "3", "--redundant", "2", "--config",
                          base, "-o", out};
    CHECK_INT_EQ(run_plan(&o, &e, 10, argv), 0);
    free(o);
    free(e);
    /* one pass, then two: equal */
    for (int passes = 1; passes <= 2; passes++) {
        snprintf(run, sizeof(run), "%s/run%d", root, passes);
        write_run(run, out, trace, 3, passes, 0);
        const char *c1[] = {"--check", run};
        CHECK_INT_EQ(run_plan(&o, &e, 2, c1), 0);
        CHECK_STR_CONTAINS(o, "result: the run measured what the plan predicted, in all 2 layers");
        CHECK_STR_CONTAINS(o, passes == 1 ? " x 1 pass)" : " x 2 passes)");
        CHECK_STR_CONTAINS(o, "routing of the run: replayed test trace");
        CHECK_STR_CONTAINS(o, "(busiest ");
        free(o);
        free(e);
    }
    /* a token more in layer 1: not a whole number of passes */
    snprintf(run, sizeof(run), "%s/run_bumped", root);
    write_run(run, out, trace, 3, 1, 1);
    const char *c2[] = {"--check", run};
    CHECK_INT_EQ(run_plan(&o, &e, 2, c2), 1);
    CHECK_STR_CONTAINS(o, "result: 1 of 2 layers differ from the prediction");
    CHECK_STR_CONTAINS(o, "OTHER TOKENS: ");
    free(o);
    free(e);
    snprintf(run, sizeof(run), "%s/run_moved", root);
    write_run(run, out, trace, 3, 1, 2);
    const char *c4[] = {"--check", run};
    CHECK_INT_EQ(run_plan(&o, &e, 2, c4), 1);
    CHECK_STR_CONTAINS(o, "result: 1 of 2 layers differ from the prediction");
    CHECK_STR_CONTAINS(o, "DIFFERS: busiest rank ");
    free(o);
    free(e);
    /* a run of a config without a prediction */
    snprintf(run, sizeof(run), "%s/run_plain", root);
    write_run(run, base, trace, 3, 1, 0);
    const char *c3[] = {"--check", run};
    CHECK_INT_EQ(run_plan(&o, &e, 2, c3), 2);
    CHECK_STR_CONTAINS(e, "holds no prediction of `moed plan --routing`");
    free(o);
    free(e);
    /* moed compare of the base's run and the planned one: load and time per layer */
    char a_run[600], b_run[600];
    snprintf(a_run, sizeof(a_run), "%s/run_plain", root);
    snprintf(b_run, sizeof(b_run), "%s/run1", root);
    const char *cmp[] = {a_run, b_run};
    size_t len = 0;
    FILE *f = open_memstream(&o, &len);
    CHECK_INT_EQ(moe_prof_compare_main(2, (char **)cmp, f), 0);
    fclose(f);
    char *yaml = read_all(out), want[256];
    loads_t pb0, pa0;
    CHECK(pred_line(yaml, 0, &pb0, &pa0));
    free(yaml);
    moe_routing_trace_t tr;
    moe_error_t err = {0};
    int64_t counts[8], mx = 0, sum = 0;
    CHECK(moe_routing_trace_open(trace, true, &tr, &err) == MOE_OK);
    moe_routing_trace_counts(&tr, 0, 0, tr.rows, counts);
    moe_routing_trace_free(&tr);
    for (int x = 0; x < 8; x++) {
        mx = counts[x] > mx ? counts[x] : mx;
        sum += counts[x];
    }
    /* tokens: the plan's before and after; hottest from the demand, entropy likewise */
    snprintf(want, sizeof(want), "\n  0      %8.3f | %-6.3f   %6.1f%% | ",
             (double)pb0.max * pb0.hosts / (double)pb0.total,
             (double)pa0.max * pa0.hosts / (double)pa0.total, 100.0 * (double)mx / (double)sum);
    CHECK_STR_CONTAINS(o, "Load and time per layer, A | B");
    CHECK_STR_CONTAINS(o, want);
    CHECK_STR_CONTAINS(o, "     routing: replayed test trace\n");
    free(o);
    /* a summary.json with layers[].routing.hottest_share and entropy_bits: read, not
     * recomputed */
    snprintf(b_run, sizeof(b_run), "%s/run_show", root);
    show_keys = true;
    write_run(b_run, out, trace, 3, 1, 0);
    show_keys = false;
    f = open_memstream(&o, &len);
    CHECK_INT_EQ(moe_prof_compare_main(2, (char **)cmp, f), 0);
    fclose(f);
    CHECK_STR_CONTAINS(o, "% | 50.0%       ");
    CHECK_STR_CONTAINS(o, "% | 75.0%       ");
    CHECK_STR_CONTAINS(o, " | 1.50   ");
    free(o);
}

/* ---- reports whose figures are unknown ---------------------------------------------- */

/* dir/summary.json, loaded (NULL: a check failed). */
static json_t *summary_load(const char *dir)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/summary.json", dir);
    json_t *doc = json_load_file(path, 0, NULL);
    CHECK(doc != NULL);
    return doc;
}

/* doc written over dir/summary.json; takes doc. */
static void summary_save(const char *dir, json_t *doc)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/summary.json", dir);
    CHECK(doc != NULL && json_dump_file(doc, path, JSON_INDENT(1)) == 0);
    json_decref(doc);
}

/* The ratio and sums a prediction line of --check shows, from the planned config's
 * comments (the plan's side of each layer: max over the mean of the expert ranks). */
static double pred_ratio(const loads_t *x)
{
    return x->total > 0 ? (double)x->max * x->hosts / (double)x->total : 0.0;
}

/* A report folder `name` (in run, its planned config's path in out: NAME_planned.yaml) of a
 * 2-layer, 8-expert, top-2 run of 64 tokens a step from a trace of 128 rows, its config as the
 * report writer flattens it with model.capacity_factor `cf`: the summary.json, loaded (NULL
 * when it cannot be read; the test's CHECK then failed). */
static json_t *plan_report(const char *name, double cf, char *run, char *out, size_t len)
{
    char trace[512], base[512], leaf[128];
    snprintf(leaf, sizeof(leaf), "%s.safetensors", name);
    path_of(trace, sizeof(trace), leaf);
    snprintf(leaf, sizeof(leaf), "%s_base.yaml", name);
    path_of(base, sizeof(base), leaf);
    snprintf(leaf, sizeof(leaf), "%s_planned.yaml", name);
    path_of(out, len, leaf);
    path_of(run, len, name);
    const int32_t lids[2] = {0, 1};
    write_trace(trace, 2, lids, 8, 2, 128, 64);
    write_base(base, &(base_t){.E = 8, .k = 2, .L = 2, .tokens = 64, .routing = "master",
                               .placement = "auto"});
    write_run(run, base, trace, 3, 1, 0);
    json_t *doc = summary_load(run);
    if (doc != NULL) {
        json_object_set_new(doc, "config",
                            json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:i, s:i, s:s, s:i, "
                                      "s:i}", "model.hidden_dim", 64, "model.ffn_dim", 128,
                                      "model.num_experts", 8, "model.top_k", 2,
                                      "model.num_layers", 2, "model.first_layer", 0,
                                      "model.capacity_factor", cf, "model.seed", 7,
                                      "placement.master_rank", 0, "runtime.routing", "master",
                                      "workload.tokens_per_step", 64, "workload.steps", 5));
    }
    return doc;
}

/* `moed plan DIR` on a report whose layer 1 demand is null (a routing rank not profiled or
 * lost; the writer keeps the array's length, every element null) plans from its kept
 * choices, which the hosts' rows gave; with kept null too (an expert's host missing as
 * well): refused, exit 2, naming the layer, nothing written. Before, null read as 0: layer
 * 1 planned as if never chosen. */
static void test_plan_demand_unknown(void)
{
    char run[512], out[512];
    json_t *doc = plan_report("run_demand_unknown", 0.0, run, out, sizeof(run));
    if (doc == NULL) {
        return;
    }
    summary_save(run, json_incref(doc));
    char *o = NULL, *e = NULL;
    const char *argv[] = {run, "--ranks", "3", "-o", out};
    CHECK_INT_EQ(run_plan(&o, &e, 5, argv), 0);
    CHECK_STR_CONTAINS(o, "moed plan: 8 experts x 2 layers onto 2 expert ranks of 3");
    free(o);
    free(e);
    unlink(out);
    json_t *nulls = json_array();
    for (int x = 0; x < 8; x++) {
        json_array_append_new(nulls, json_null());
    }
    json_t *layer1 = json_array_get(json_object_get(doc, "layers"), 1);
    json_object_set_new(layer1, "demand", nulls);
    summary_save(run, json_incref(doc));
    CHECK_INT_EQ(run_plan(&o, &e, 5, argv), 0); /* kept known: planned from it */
    CHECK_STR_CONTAINS(o, "moed plan: 8 experts x 2 layers onto 2 expert ranks of 3");
    free(o);
    free(e);
    unlink(out);
    json_object_set(layer1, "kept", nulls);
    summary_save(run, doc);
    refuses(5, argv, ": layer 1's kept choices are unknown (summary.json layers[].kept null: a "
                     "routing rank and an expert's host not profiled or lost): nothing to plan "
                     "from; run with every routing rank profiled", out);
}

/* `moed plan --check` on a run whose layer 1 has an expert rank's tokens null (the expert's
 * experts[] row; its host not profiled or lost): layer 1 reads UNKNOWN with its run max/mean
 * n/a, the overall run max/mean n/a (never llround(NAN)'s figure), layer 0 still equal;
 * exit 1. */
static void test_check_tokens_unknown(void)
{
    char trace[512], base[512], out[512], run[512];
    path_of(trace, sizeof(trace), "chk.safetensors"); /* test_check's */
    path_of(base, sizeof(base), "chk_base.yaml");
    path_of(out, sizeof(out), "chk_out.yaml");
    path_of(run, sizeof(run), "run_tokens_unknown");
    write_run(run, out, trace, 3, 1, 0);
    json_t *doc = summary_load(run);
    if (doc == NULL) {
        return;
    }
    json_t *experts = json_object_get(doc, "experts"), *row;
    size_t i;
    int nulled = 0;
    json_array_foreach(experts, i, row) {
        /* an expert with one copy (its row has calls; a copied one's are in replicas[]) */
        if (nulled == 0 && json_integer_value(json_object_get(row, "layer")) == 1 &&
            json_object_get(row, "calls") != NULL) {
            json_object_set_new(row, "tokens", json_null());
            nulled++;
        }
    }
    CHECK_INT_EQ(nulled, 1);
    summary_save(run, doc);
    char *o = NULL, *e = NULL, *yaml = read_all(out), want[256];
    loads_t pb[2], pa[2];
    CHECK(pred_line(yaml, 0, &pb[0], &pa[0]) && pred_line(yaml, 1, &pb[1], &pa[1]));
    free(yaml);
    const char *argv[] = {"--check", run};
    CHECK_INT_EQ(run_plan(&o, &e, 2, argv), 1);
    snprintf(want, sizeof(want), "\n  0       %9.3f %9.3f   equal (busiest rank ",
             pred_ratio(&pa[0]), pred_ratio(&pa[0]));
    CHECK_STR_CONTAINS(o, want);
    snprintf(want, sizeof(want), "\n  1       %9.3f       n/a   UNKNOWN: an expert rank's tokens "
             "are null (summary.json experts[], replicas[]: a host not profiled or lost) ",
             pred_ratio(&pa[1]));
    CHECK_STR_CONTAINS(o, want);
    double pmx = (double)(pa[0].max + pa[1].max);
    double pmean = (double)pa[0].total / pa[0].hosts + (double)pa[1].total / pa[1].hosts;
    snprintf(want, sizeof(want), "\n  overall %9.3f       n/a   (sum over layers of the "
             "busiest rank's tokens / sum of the means)\n", pmx / pmean);
    CHECK_STR_CONTAINS(o, want);
    CHECK_STR_CONTAINS(o, "result: 1 of 2 layers differ from the prediction");
    CHECK(o != NULL && strstr(o, "nan") == NULL);
    free(o);
    free(e);
}

/* `moed plan DIR` on a report with a capacity limit plans from layers[].kept, not demand:
 * the limit is per expert, so a copy of a dropping expert adds nothing it can compute. Demand
 * [80, 10 x 7] kept [20, 10 x 7] on ranks 1 (0-3) and 2 (4-7): before = 50 / 45 = 1.111
 * (from demand it read 110 / 75 = 1.467, and the copies went to expert 0). */
static void test_plan_capacity_kept(void)
{
    char run[512], out[512];
    json_t *doc = plan_report("run_capacity_kept", 1.25, run, out, sizeof(run));
    if (doc == NULL) {
        return;
    }
    for (int l = 0; l < 2; l++) {
        json_t *row = json_array_get(json_object_get(doc, "layers"), (size_t)l);
        json_t *d = json_array(), *k = json_array();
        for (int e = 0; e < 8; e++) {
            json_array_append_new(d, json_integer(e == 0 ? 80 : 10));
            json_array_append_new(k, json_integer(e == 0 ? 20 : 10));
        }
        json_object_set_new(row, "demand", d);
        json_object_set_new(row, "kept", k);
    }
    summary_save(run, doc);
    char *o = NULL, *e = NULL;
    const char *argv[] = {run, "--ranks", "3", "-o", out};
    CHECK_INT_EQ(run_plan(&o, &e, 5, argv), 0);
    CHECK_STR_CONTAINS(o, "the kept counts (after model.capacity_factor)");
    CHECK_STR_CONTAINS(o, "layer 0    before 1.111");
    CHECK_STR_CONTAINS(o, "overall    before 1.111");
    /* the report has no token positions: the even split of a copy's load is said, and
     * what predicts the runtime's split, on the screen and in the planned config */
    static const char *const caveat[2] = {
        "\n  a copied expert's load is split evenly over its copies here; the runtime splits "
        "its\n  kept tokens by token position (under a capacity limit most land on its first "
        "copy):\n  moed plan --routing TRACE (profiler.record_routing) predicts that split\n",
        "\n# a copied expert's load is split evenly over its copies here; the runtime splits "
        "its\n# kept tokens by token position (under a capacity limit most land on its first "
        "copy):\n# moed plan --routing TRACE (profiler.record_routing) predicts that split\n"};
    CHECK_STR_CONTAINS(o, caveat[0]);
    char *y = read_all(out);
    CHECK_STR_CONTAINS(y, caveat[1]);
    free(y);
    free(o);
    free(e);
    unlink(out);
}

int main(void)
{
    snprintf(root, sizeof(root), "/tmp/moed-plan-routing.XXXXXX");
    if (mkdtemp(root) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    test_plain();
    test_replicas();
    test_capacity_cycle();
    test_capacity_kept_loads();
    test_layers_kept();
    test_folder_base();
    test_refusals();
    test_check();
    test_check_tokens_unknown();
    test_plan_demand_unknown();
    test_plan_capacity_kept();
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
    if (moe_test_failures_ == 0 && system(cmd) != 0) {
        fprintf(stderr, "could not remove %s\n", root);
    }
    return moe_test_finish("test_plan_routing");
}
