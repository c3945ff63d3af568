/* Part planner (profiler/src/planner/): `moed plan`: a placement for the loads a report
 * recorded or a routing trace holds, by the EPLB the runtime rebalances with
 * (runtime/src/config/eplb.c), written as a config; and the check of a replay against the
 * plan's prediction. May include: compare report (and the public headers in moe/,
 * moe_config/ and moe_model/: the trace reader). One file of each part's folder opens with
 * such a comment; tests/lint/parts.sh holds every part to its list. */
/* `moed plan REPORT_DIR --ranks N [--redundant R] [--slots S] [--hostfile F] [-o FILE]
 * [--force]`:
 * a placement for the loads a report recorded (its kept choices per layer and expert),
 * computed like DeepSeek's EPLB (moe_config/eplb.h, runtime/src/config/eplb.c), written as the
 * run's resolved config with the new placement, the predicted per-rank load max/mean before
 * and after as comments. It reads summary.json with the compare part's readers
 * (compare/json_lookup.h, compare/rank_load.h). `--routing PATH` takes the loads from a
 * routing trace instead (plan_trace.c), `--check RUN_DIR` compares a replay with what the
 * plan predicted (plan_check.c). */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "moe_config/config.h"
#include "moe_prof/prof.h"
#include "moe_config/eplb.h"
#include "compare/json_lookup.h"
#include "compare/rank_load.h"
#include "report/atomic_file.h"
#include "planner/plan_int.h"
#include "moe/file.h"

/* The usage text, for --help. */
static void plan_usage_text(FILE *f)
{
    fprintf(f, "usage: moed plan REPORT_DIR --ranks N [--redundant R] [--slots S] [--hostfile F] "
            "[-o FILE] [--force]\n"
            "       moed plan --routing PATH --ranks N [--redundant R] [--slots S] [--hostfile F] "
            "[--config BASE.yaml]\n                 [-o FILE] [--force]\n"
            "       moed plan --check RUN_DIR\n"
            "  N ranks in the new run (mpirun -np, 2 or more); R extra expert copies per layer "
            "(default 0);\n"
            "  S the most experts one rank holds per layer (default ceil((E + R) / expert "
            "ranks));\n  F an Open MPI hostfile ('host slots=N' lines: ranks fill hosts in "
            "order) to balance nodes first;\n  -o FILE the config to write (default "
            "REPORT_DIR/planned.yaml; '-': stdout);\n  --force replaces FILE when it exists (only a "
            "moed config of the same model shape)\n"
            "  --routing PATH: the loads of a routing trace (moed-routing/1: a file, or a folder "
            "holding\n    routing.safetensors) instead of a report's; BASE.yaml the model's "
            "config (default: the\n    config of the moed report folder PATH; -o defaults to "
            "PATH/planned.yaml for a folder)\n"
            "  --check RUN_DIR: a run of a planned config (replaying the trace) against the "
            "plan's\n    prediction, layer by layer; exit 1 when they differ\n");
}

/* A usage error: one line, as moed's own (the usage is what --help is for). */
static int plan_usage(const char *why)
{
    fprintf(stderr, "moed plan: error: %s (see moed plan --help)\n", why);
    return PLAN_USAGE;
}

/* A whole number in [0, max]: 0, or -1 (not a number) / -2 (past max). */
static int plan_int(const char *s, int max, int *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end != '\0' || v < 0) {
        return -1;
    }
    if (errno == ERANGE || v > max) {
        return -2;
    }
    *out = (int)v;
    return 0;
}

/* Every option of moed plan: its name, what it takes, where it goes in plan_args_t, and
 * for a number its largest value (--ranks past moed's largest job, --slots past a layer's
 * experts (a rank holds one copy of an expert at most), --redundant past every rank holding
 * every expert: so S x ranks and E + R stay far inside an int). */
typedef enum { PLAN_OPT_PATH, PLAN_OPT_INT, PLAN_OPT_FLAG } plan_opt_kind_t;
typedef struct plan_opt {
    const char *name;
    plan_opt_kind_t kind;
    size_t offset; /* of the const char *, int or bool in plan_args_t */
    int max;       /* PLAN_OPT_INT */
} plan_opt_t;

static const plan_opt_t k_plan_opts[] = {
    {"--routing", PLAN_OPT_PATH, offsetof(plan_args_t, routing), 0},
    {"--config", PLAN_OPT_PATH, offsetof(plan_args_t, config), 0},
    {"--check", PLAN_OPT_PATH, offsetof(plan_args_t, check), 0},
    {"--hostfile", PLAN_OPT_PATH, offsetof(plan_args_t, hostfile), 0},
    {"-o", PLAN_OPT_PATH, offsetof(plan_args_t, out), 0},
    {"--ranks", PLAN_OPT_INT, offsetof(plan_args_t, ranks), MOE_MAX_RANKS},
    {"--redundant", PLAN_OPT_INT, offsetof(plan_args_t, redundant),
     MOE_MAX_RANKS * MOE_MAX_EXPERTS},
    {"--slots", PLAN_OPT_INT, offsetof(plan_args_t, slots), MOE_MAX_EXPERTS},
    {"--force", PLAN_OPT_FLAG, offsetof(plan_args_t, force), 0},
};
#define PLAN_NUM_OPTS (sizeof(k_plan_opts) / sizeof(k_plan_opts[0]))

/* The option f names, as NAME or NAME=VALUE (*value then points past the '='; NULL for
 * NAME alone), as moed's own options take them (docs/config.md). */
static const plan_opt_t *plan_opt_find(const char *f, const char **value)
{
    const char *eq = strncmp(f, "--", 2) == 0 ? strchr(f, '=') : NULL;
    size_t n = eq != NULL ? (size_t)(eq - f) : strlen(f);
    *value = eq != NULL ? eq + 1 : NULL;
    for (size_t i = 0; i < PLAN_NUM_OPTS; i++) {
        if (strlen(k_plan_opts[i].name) == n && strncmp(f, k_plan_opts[i].name, n) == 0) {
            return &k_plan_opts[i];
        }
    }
    return NULL;
}

/* What the modes allow: a report folder or --routing (not both), --config only with
 * --routing, --check alone. */
static int plan_check_modes(const plan_args_t *a)
{
    if (a->check != NULL) {
        bool alone = a->dir == NULL && a->routing == NULL && a->config == NULL &&
                     a->hostfile == NULL && a->out == NULL && a->ranks < 0 && !a->force &&
                     a->redundant == 0 && a->slots == 0;
        return alone ? PLAN_OK : plan_usage("--check RUN_DIR takes no other option");
    }
    if (a->routing != NULL && a->dir != NULL) {
        return plan_usage("a report folder or --routing PATH, not both");
    }
    if (a->config != NULL && a->routing == NULL) {
        return plan_usage("--config BASE.yaml goes with --routing PATH (a report has its "
                          "config)");
    }
    if (a->dir == NULL && a->routing == NULL) {
        return plan_usage("no report folder");
    }
    if (a->ranks < 0) {
        return plan_usage("--ranks N is required");
    }
    return PLAN_OK;
}

/* An option given twice is an error, as for moed itself (docs/config.md): which one would
 * win is a guess the user should not have to make. */
static int plan_parse_args(int argc, char **argv, plan_args_t *a)
{
    char why[256];
    bool seen[PLAN_NUM_OPTS] = {false};
    *a = (plan_args_t){.ranks = -1};
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i];
        if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) {
            plan_usage_text(stdout);
            return PLAN_HELP;
        }
        const char *v = NULL;
        const plan_opt_t *o = plan_opt_find(f, &v);
        if (o == NULL) {
            if (f[0] == '-' && strcmp(f, "-") != 0) {
                snprintf(why, sizeof(why), "unknown option: %s", f);
                return plan_usage(why);
            }
            if (a->dir != NULL) {
                return plan_usage("one report folder only");
            }
            a->dir = f;
            continue;
        }
        if (seen[o - k_plan_opts]) {
            snprintf(why, sizeof(why), "%s given twice", f);
            return plan_usage(why);
        }
        seen[o - k_plan_opts] = true;
        char *dst = (char *)a + o->offset;
        if (o->kind == PLAN_OPT_FLAG && v != NULL) {
            snprintf(why, sizeof(why), "%s takes no value", o->name);
            return plan_usage(why);
        }
        if (o->kind == PLAN_OPT_FLAG) {
            *(bool *)dst = true;
            continue;
        }
        if (v == NULL && i + 1 >= argc) {
            snprintf(why, sizeof(why), "%s needs %s", f,
                     o->kind == PLAN_OPT_INT ? "a non-negative integer" : "a path");
            return plan_usage(why);
        }
        v = v != NULL ? v : argv[++i];
        f = o->name; /* the messages below name the option, not NAME=VALUE */
        if (o->kind == PLAN_OPT_PATH) {
            *(const char **)dst = v;
            a->out_given |= dst == (char *)&a->out;
            continue;
        }
        int got = plan_int(v, o->max, (int *)dst);
        if (got == -2) {
            snprintf(why, sizeof(why), "%s %.40s is more than %d", f, v, o->max);
            return plan_usage(why);
        }
        if (got != 0) {
            snprintf(why, sizeof(why), "%s needs a non-negative integer", f);
            return plan_usage(why);
        }
    }
    return plan_check_modes(a);
}

/* "{1: [0, 1], 2: [0, 2]}" for layer l's new placement. */
static void yaml_set(FILE *f, const plan_t *p, int l)
{
    const char *sep = "";
    fputc('{', f);
    for (int j = 0; j < p->n; j++) {
        const uint8_t *h = p->host + ((size_t)l * p->n + j) * p->E;
        const char *s2 = "";
        fprintf(f, "%s%d: [", sep, (int)p->ranks[j]);
        for (int e = 0; e < p->E; e++) {
            if (h[e]) {
                fprintf(f, "%s%d", s2, e);
                s2 = ", ";
            }
        }
        fputc(']', f);
        sep = ", ";
    }
    fputc('}', f);
}

static bool layer_same(const plan_t *p, int a, int b)
{
    size_t sz = (size_t)p->n * p->E;
    return memcmp(p->host + (size_t)a * sz, p->host + (size_t)b * sz, sz) == 0;
}

static void yaml_placement(FILE *f, const plan_t *p)
{
    fputs("  experts: ", f);
    yaml_set(f, p, 0);
    fputc('\n', f);
    bool differ = false;
    for (int l = 1; l < p->L; l++) {
        differ |= !layer_same(p, 0, l);
    }
    if (!differ) {
        return;
    }
    fputs("  layers:\n", f);
    for (int l = 1; l < p->L; l++) {
        if (!layer_same(p, 0, l)) {
            fprintf(f, "    %d: ", l);
            yaml_set(f, p, l);
            fputc('\n', f);
        }
    }
}

/* What a plan balances, for the printed figures and the YAML comments: summary.json
 * layers[].kept, the choices the experts computed. Under a capacity limit an expert computes
 * at most its capacity however many copies it has, so that is the load a placement moves;
 * without one it is the demand, known also where the routing ranks' counts are not (the
 * hosts' rows). */
static const char *plan_load_text(const plan_t *p)
{
    return p->old->capacity_factor > 0.0 ? "kept counts (after model.capacity_factor)"
                                         : "kept counts (no capacity limit: the demand)";
}

/* The even split's caveat (the report has no token positions), after `lead` on each line:
 * the screen's indent or the YAML comment's "#". */
static void plan_split_caveat(FILE *f, const char *lead)
{
    fprintf(f, "%s a copied expert's load is split evenly over its copies here; the runtime "
            "splits its\n%s kept tokens by token position (under a capacity limit most land on "
            "its first copy):\n%s moed plan --routing TRACE (profiler.record_routing) predicts "
            "that split\n", lead, lead, lead);
}

/* The config written: summary.json's "config" (or the base's values) back into YAML, one
 * section per key prefix, with the new placement and the figures as comments. */
static moe_status_t plan_yaml(plan_t *p, moe_error_t *err)
{
    size_t len = 0;
    FILE *f = open_memstream(&p->yaml, &len);
    if (f == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "out of memory");
    }
    const json_t *cfg = moe_json_path(p->doc, "config");
    plan_pick_t ck = plan_pick_of(cfg);
    if (p->a.routing != NULL) {
        plan_trace_yaml_head(p, f);
    } else {
        fputs("# moed plan ", f);
        plan_comment_text(f, p->a.dir);
        fprintf(f, " --ranks %d --redundant %d%s", p->a.ranks, p->a.redundant,
                p->a.hostfile ? " --hostfile " : "");
        plan_comment_text(f, p->a.hostfile ? p->a.hostfile : "");
        fputc('\n', f);
        fprintf(f, "# predicted per-rank load max/mean (1.00 = balanced), from the report's "
                "%s;\n", plan_load_text(p));
        plan_split_caveat(f, "#");
        fprintf(f, "# overall = sum over layers of the busiest rank's load / sum of the mean "
                "loads:\n#   overall: before %.3f, after %.3f\n", p->before_all, p->after_all);
        for (int l = 0; l < p->L; l++) {
            fprintf(f, "#   layer %d: before %.3f, after %.3f\n", l, p->before[l],
                    p->after[l]);
        }
    }
    char section[32] = "";
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)cfg, key, v) {
        const char *dot = strchr(key, '.');
        if (dot == NULL || (size_t)(dot - key) >= sizeof(section) || plan_yaml_skip(key, v, ck)) {
            continue;
        }
        if (strncmp(section, key, (size_t)(dot - key)) != 0 || section[dot - key] != '\0') {
            snprintf(section, sizeof(section), "%.*s", (int)(dot - key), key);
            fprintf(f, "%s:\n", section);
            if (strcmp(section, "placement") == 0) {
                yaml_placement(f, p);
            }
        }
        fprintf(f, "  %s: ", dot + 1);
        plan_yaml_value(f, v);
        fputc('\n', f);
    }
    fclose(f);
    return MOE_OK;
}

static moe_status_t plan_load(plan_t *p, moe_error_t *err)
{
    moe_status_t st = plan_summary_load(p->a.dir, &p->doc, err);
    if (st == MOE_OK) {
        st = plan_old_config(p, err);
    }
    if (st != MOE_OK) {
        return st;
    }
    p->E = (int)p->old->num_experts;
    p->L = (int)p->old->num_layers;
    const json_t *layers = moe_json_path(p->doc, "layers");
    if ((int)moe_json_count(layers) != p->L) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "%s: the report has %d layer rows, its "
                             "config %d layers", p->a.dir, (int)moe_json_count(layers), p->L);
    }
    p->loads = calloc((size_t)p->L * p->E, sizeof(double));
    if (p->loads == NULL) {
        return MOE_ERR_NO_MEMORY;
    }
    const char *key = "kept"; /* plan_load_text */
    for (int l = 0; l < p->L; l++) {
        const json_t *d = json_object_get(json_array_get(layers, (size_t)l), key);
        if ((int)json_array_size(d) != p->E) {
            return moe_error_set(err, MOE_ERR_INVALID_ARG, "%s: layer %d has no per-expert "
                                 "%s (summary.json layers[].%s) for %d experts", p->a.dir,
                                 l, key, key, p->E);
        }
        for (int e = 0; e < p->E; e++) {
            const json_t *v = json_array_get(d, (size_t)e);
            if (json_is_null(v)) {
                return moe_error_set(err, MOE_ERR_INVALID_ARG, "%s: layer %d's %s choices "
                                     "are unknown (summary.json layers[].%s null: a routing "
                                     "rank and an expert's host not profiled or lost): nothing "
                                     "to plan from; run with every routing rank profiled",
                                     p->a.dir, l, key, key);
            }
            p->loads[(size_t)l * p->E + e] = moe_json_num(v, 0);
        }
    }
    double total = 0.0;
    for (size_t i = 0; i < (size_t)p->L * p->E; i++) {
        total += p->loads[i];
    }
    if (!(total > 0.0)) { /* all zero: any placement "balances" it; say so instead */
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "%s: the report recorded no expert "
                             "choices (%.0f recorded steps: every step a warm-up step): nothing "
                             "to plan from; run more steps than profiler.warmup_steps",
                             p->a.dir,
                             moe_json_num(moe_json_path(p->doc, "run.recorded_steps"), 0));
    }
    return MOE_OK;
}

/* Ranks of the new run that host experts (the master only routes in master routing, as
 * placement auto has it), and their nodes from the hostfile. */
static moe_status_t plan_ranks(plan_t *p, moe_error_t *err)
{
    int N = p->a.ranks, master = (int)p->old->master_rank;
    bool skip = p->old->routing == MOE_ROUTING_MASTER && N > 1;
    if (skip && master >= N) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "--ranks %d: the report's "
                             "placement.master_rank %d does not exist in %d ranks", N, master, N);
    }
    p->ranks = calloc((size_t)N, sizeof(int32_t));
    p->node = calloc((size_t)N, sizeof(int32_t));
    if (p->ranks == NULL || p->node == NULL) {
        return MOE_ERR_NO_MEMORY;
    }
    int32_t *node_of = calloc((size_t)N, sizeof(int32_t));
    if (node_of == NULL) {
        return MOE_ERR_NO_MEMORY;
    }
    moe_status_t st = MOE_OK;
    if (p->a.hostfile != NULL) {
        const char *kind = NULL;
        FILE *f = moe_file_fopen_regular(p->a.hostfile, "r", &kind); /* a FIFO would wait */
        char line[512];
        int r = 0, nodes = 0;
        if (f == NULL) {
            st = moe_error_set(err, MOE_ERR_INVALID_ARG, "--hostfile %s: %s", p->a.hostfile,
                               kind != NULL ? kind : strerror(errno));
        }
        while (st == MOE_OK && fgets(line, sizeof(line), f) != NULL) {
            char host[256];
            int slots = 1;
            const char *s = strstr(line, "slots=");
            if (line[0] == '#' || sscanf(line, "%255s", host) != 1 || host[0] == '#') {
                continue;
            }
            if (s != NULL && (sscanf(s + 6, "%d", &slots) != 1 || slots < 1)) {
                st = moe_error_set(err, MOE_ERR_INVALID_ARG, "--hostfile %s: bad slots= in "
                                   "'%s'", p->a.hostfile, host);
            }
            for (int i = 0; st == MOE_OK && i < slots && r < N; i++) {
                node_of[r++] = nodes;
            }
            nodes++;
        }
        if (f != NULL) {
            fclose(f);
        }
        if (st == MOE_OK && r < N) {
            st = moe_error_set(err, MOE_ERR_INVALID_ARG, "--hostfile %s has %d slots, fewer than "
                               "--ranks %d", p->a.hostfile, r, N);
        }
    }
    for (int r = 0; st == MOE_OK && r < N; r++) {
        if (!(skip && r == master)) {
            p->node[p->n] = node_of[r];
            p->ranks[p->n++] = r;
        }
    }
    free(node_of);
    return st;
}

/* Layer l under the report's placement (experts[].rank, replicas[]): the router's counts
 * split evenly over each expert's copies; its busiest rank's load into *mx, the mean over
 * the ranks that hold experts into *mean. */
static moe_status_t plan_before(const plan_t *p, int l, double *mx, double *mean,
                                moe_error_t *err)
{
    int W = (int)moe_json_num(moe_json_path(p->doc, "run.world_size"), 0);
    double *load = calloc((size_t)W, sizeof(double));
    uint8_t *copies = calloc((size_t)W * p->E, 1);
    moe_status_t st = load != NULL && copies != NULL ? MOE_OK : MOE_ERR_NO_MEMORY;
    if (st == MOE_OK &&
        moe_rank_loads(p->doc, l, W, p->E, p->loads + (size_t)l * p->E, load, copies) == 0) {
        st = moe_error_set(err, MOE_ERR_INVALID_ARG, "%s: layer %d: the report says on no rank "
                           "where its experts ran (summary.json experts[].rank)", p->a.dir, l);
    }
    if (st == MOE_OK) {
        moe_rank_load_stats(load, copies, W, p->E, mx, mean);
    }
    free(load);
    free(copies);
    return st;
}

static moe_status_t plan_compute(plan_t *p, moe_error_t *err)
{
    int W = p->old->world_size > p->a.ranks ? p->old->world_size : p->a.ranks;
    size_t sz = (size_t)p->n * p->E;
    p->host = calloc((size_t)p->L * sz, 1);
    p->before = calloc((size_t)p->L, sizeof(double));
    p->after = calloc((size_t)p->L, sizeof(double));
    double *load = calloc((size_t)W, sizeof(double));
    moe_status_t st = p->host && p->before && p->after && load ? MOE_OK : MOE_ERR_NO_MEMORY;
    double bmax = 0, bmean = 0, amax = 0, amean = 0;
    for (int l = 0; st == MOE_OK && l < p->L; l++) {
        moe_eplb_in_t in = {.num_experts = p->E, .loads = p->loads + (size_t)l * p->E,
                            .num_ranks = p->n, .ranks = p->ranks, .node = p->node,
                            .redundant = p->a.redundant, .slots = p->a.slots};
        moe_eplb_out_t out = {.host = p->host + (size_t)l * sz, .rank_load = load};
        double mx = 0, mean = 0;
        st = moe_eplb_place(&in, &out, err);
        if (st == MOE_OK) {
            double sum = 0;
            int held = 0; /* the ranks holding an expert: one the packing left empty (fewer
                           * copies than ranks) is in no mean, as before's (plan_before) */
            for (int j = 0; j < p->n; j++) {
                bool holds = false;
                for (int e = 0; e < p->E; e++) {
                    holds = holds || out.host[(size_t)j * (size_t)p->E + (size_t)e];
                }
                held += holds;
                sum += holds ? load[j] : 0.0;
                mx = holds && load[j] > mx ? load[j] : mx;
            }
            mean = held > 0 ? sum / held : 0.0;
            p->after[l] = mean > 0 ? mx / mean : 0;
            amax += mx;
            amean += mean;
            /* a trace's before and after come from the runtime's own split (plan_trace.c) */
            st = p->a.routing == NULL ? plan_before(p, l, &mx, &mean, err) : MOE_OK;
        }
        if (st == MOE_OK) {
            p->before[l] = mean > 0 ? mx / mean : 0;
            bmax += mx;
            bmean += mean;
        }
    }
    /* overall, before and after alike: layers run one after another and each waits for its
     * busiest rank, so a step pays the sum of the layers' maxima; over the sum of their means */
    p->before_all = bmean > 0 ? bmax / bmean : 0;
    p->after_all = amean > 0 ? amax / amean : 0;
    free(load);
    return st == MOE_OK && p->a.routing != NULL ? plan_trace_predict(p, err) : st;
}

/* --ranks enough for the experts, --redundant within the free slots. Slots: a rank holds at
 * most S experts per layer (--slots, default ceil((E + R) / expert ranks)) and at most one
 * copy of each, so an expert has at most one copy per expert rank. */
static moe_status_t plan_check(plan_t *p, moe_error_t *err)
{
    if (p->old->copies != MOE_COPIES_REPLICAS) {
        bool columns = p->old->copies == MOE_COPIES_COLUMNS;
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "the base config sets placement.copies: "
                             "%s (plan from a run or config with placement.copies: replicas)",
                             columns ? "columns: every expert is split over the expert ranks, "
                                       "each reading an even share of every expert, so there "
                                       "is no placement to plan; moed plan places whole experts"
                                     : "balance: each step picks the copy of every expert by "
                                       "the load of that step, which moed plan does not "
                                       "predict; it plans replicas that split an expert's "
                                       "tokens by position");
    }
    if (p->a.ranks < 2 || p->n < 1) { /* above MOE_MAX_RANKS: refused by the parser */
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "--ranks %d is too small: a placement "
                             "needs 2 ranks or more (1 rank hosts every expert%s)",
                             p->a.ranks, p->old->routing == MOE_ROUTING_MASTER ?
                             "; in master routing the master only routes" : "");
    }
    int S = p->a.slots > 0 ? p->a.slots : (p->E + p->a.redundant + p->n - 1) / p->n;
    if (p->E > S * p->n) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "--ranks %d is too small: %d experts "
                             "need %d expert ranks at %d slots each, it gives %d", p->a.ranks,
                             p->E, (p->E + S - 1) / S, S, p->n);
    }
    if (p->E + p->a.redundant > S * p->n) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "--redundant %d is more than the %d free "
                             "slots (%d expert ranks x %d slots - %d experts)", p->a.redundant,
                             S * p->n - p->E, p->n, S, p->E);
    }
    if (p->a.redundant > p->E * (p->n - 1)) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "--redundant %d is more than the %d free "
                             "slots: a rank holds one copy of an expert at most, so %d experts "
                             "on %d expert ranks take %d extra copies at most", p->a.redundant,
                             p->E * (p->n - 1), p->E, p->n, p->E * (p->n - 1));
    }
    return MOE_OK;
}

/* The config is written only where no file is, or with --force over a moed config of the
 * same model shape (a plan written before); never over another model's config nor a file
 * that is no config. */
static moe_status_t plan_check_target(const plan_t *p, moe_error_t *err)
{
    const char *o = p->a.out_given ? "-o " : "";
    char *text = NULL;
    size_t len = 0;
    struct stat sb;
    if (strcmp(p->a.out, "-") == 0 || stat(p->a.out, &sb) != 0) {
        return MOE_OK;
    }
    moe_config_t *c = calloc(1, sizeof(*c));
    moe_error_t e2 = {0};
    moe_status_t st = c != NULL ? moe_cfg_read_file(p->a.out, &text, &len, &e2) : MOE_ERR_NO_MEMORY;
    if (st == MOE_OK) {
        st = moe_cfg_parse(text, len, p->a.out, 1, c, &e2);
    }
    if (st != MOE_OK) {
        st = moe_error_set(err, MOE_ERR_INVALID_ARG, "%s%s exists and is not a moed config: "
                           "not replacing it", o, p->a.out);
    } else if (c->num_experts != p->old->num_experts || c->num_layers != p->old->num_layers ||
               c->hidden_dim != p->old->hidden_dim || c->ffn_dim != p->old->ffn_dim) {
        st = moe_error_set(err, MOE_ERR_INVALID_ARG, "%s%s is a config of another model shape "
                           "(%lld experts x %lld layers, hidden %lld) than the %s (%d x %d, "
                           "hidden %lld): not replacing it", o, p->a.out, (long long)c->num_experts,
                           (long long)c->num_layers, (long long)c->hidden_dim,
                           p->a.routing != NULL ? "base config's" : "report's", p->E, p->L,
                           (long long)p->old->hidden_dim);
    } else if (!p->a.force) {
        st = moe_error_set(err, MOE_ERR_INVALID_ARG, "%s%s exists (a config of this model): not "
                           "replacing it; --force replaces it, or name another file with -o",
                           o, p->a.out);
    }
    free(text);
    free(c);
    return st;
}

static void plan_print(const plan_t *p, FILE *out)
{
    if (p->a.routing != NULL) {
        plan_trace_print(p, out);
        return;
    }
    fprintf(out, "moed plan: %d experts x %d layers onto %d expert ranks of %d, %d extra "
            "copies per layer%s\n", p->E, p->L, p->n, p->a.ranks, p->a.redundant,
            p->a.hostfile ? " (nodes first, from the hostfile)" : "");
    fprintf(out, "predicted per-rank load max/mean (1.00 = balanced; the %s;\n  overall: "
            "the sum over layers of the busiest rank's load over the sum of the mean loads, as "
            "a step pays it):\n", plan_load_text(p));
    for (int l = 0; l < p->L; l++) {
        fprintf(out, "  layer %-4d before %.3f  after %.3f\n", l, p->before[l], p->after[l]);
    }
    fprintf(out, "  overall    before %.3f  after %.3f\n", p->before_all, p->after_all);
    plan_split_caveat(out, " ");
}

static moe_status_t plan_write(plan_t *p, FILE *out, moe_error_t *err)
{
    moe_status_t st = plan_yaml(p, err);
    moe_config_t *c = calloc(1, sizeof(*c));
    if (st == MOE_OK && c == NULL) {
        st = MOE_ERR_NO_MEMORY;
    }
    if (st == MOE_OK) { /* what we write must load for --ranks */
        st = moe_cfg_parse(p->yaml, strlen(p->yaml), "the planned config", p->a.ranks, c, err);
    }
    free(c);
    if (st != MOE_OK) {
        return st;
    }
    if (strcmp(p->a.out, "-") == 0) {
        fputs(p->yaml, out);
        return MOE_OK;
    }
    int e = moe_afile_write(p->a.out, p->yaml, strlen(p->yaml));
    if (e != 0) {
        return moe_error_set(err, MOE_ERR_IO, "cannot write %s: %s", p->a.out, strerror(e));
    }
    plan_print(p, out);
    fprintf(out, "config: %s (run it with mpirun -np %d moed --config %s)\n", p->a.out,
            p->a.ranks, p->a.out);
    return MOE_OK;
}

int moe_prof_plan_main(int argc, char **argv, FILE *out)
{
    plan_t p = {0};
    char def_out[MOE_PATH_MAX + 32];
    moe_error_t err = {0};
    int rc = plan_parse_args(argc, argv, &p.a);
    if (rc != PLAN_OK) {
        return rc == PLAN_HELP ? PLAN_OK : rc;
    }
    if (p.a.check != NULL) {
        return plan_check_main(&p.a, out);
    }
    if (p.a.out == NULL) {
        struct stat sb; /* a PATH that is not there: the trace's read below says so */
        if (p.a.routing != NULL && stat(p.a.routing, &sb) == 0 && !S_ISDIR(sb.st_mode)) {
            return plan_usage("-o FILE is required with --routing naming a file (a folder's "
                              "plan goes to PATH/planned.yaml)");
        }
        moe_path_join(def_out, sizeof(def_out), p.a.routing != NULL ? p.a.routing : p.a.dir,
                      "planned.yaml");
        p.a.out = def_out;
    }
    p.old = calloc(1, sizeof(*p.old));
    moe_status_t st = p.old == NULL            ? MOE_ERR_NO_MEMORY
                      : p.a.routing != NULL ? plan_trace_load(&p, &err)
                                            : plan_load(&p, &err);
    if (st == MOE_OK) {
        st = plan_ranks(&p, &err);
    }
    if (st == MOE_OK) {
        st = plan_check(&p, &err);
    }
    if (st == MOE_OK) {
        st = plan_check_target(&p, &err);
    }
    if (st == MOE_OK) {
        st = plan_compute(&p, &err);
    }
    bool writing = false;
    if (st == MOE_OK) {
        writing = true;
        st = plan_write(&p, out, &err);
    }
    if (st != MOE_OK) {
        fprintf(stderr, "moed plan: error: %s\n", err.msg[0] ? err.msg : moe_status_string(st));
        rc = st == MOE_ERR_NO_MEMORY            ? PLAN_RUNTIME
             : writing && st == MOE_ERR_IO ? PLAN_WRITE /* -o could not be written */
                                           : PLAN_USAGE;
    }
    json_decref(p.doc);
    free(p.old);
    free(p.ranks);
    free(p.node);
    free(p.loads);
    free(p.host);
    free(p.before);
    free(p.after);
    free(p.yaml);
    plan_trace_free(&p);
    return rc;
}
