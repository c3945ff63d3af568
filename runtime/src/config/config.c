/* Part config (runtime/src/config/): the YAML config: one key table drives the loader, the
 * checks, --help-config and the did-you-mean. May include: base (and the public headers in
 * moe/). One file of each part's folder opens with such a comment; tests/lint/parts.sh
 * holds every part to its list. */
/* moed configuration: the key table, the YAML loader, the cross checks and the placement.
 *
 * cfg_keys[] below is the only place a key is declared. moe_cfg_defaults() parses each
 * entry's default text, the loader looks keys up in it, the error messages take their
 * bounds and enum names from it, and moe_cfg_print_reference() prints it. Adding a key is
 * one line in the table plus its field in moe_config_t.
 *
 * The loader uses libyaml's document API: the whole (small) file becomes a node graph
 * whose nodes carry their line and column, and the walk over it has a fixed depth
 * (sections -> keys -> placement ranks -> expert ids), so no input can make it recurse.
 * Aliases only point at existing nodes, so they cannot blow the walk up either. libyaml
 * itself is superlinear in nesting depth and anchor count, so an event pass bounds both
 * before the load (yaml_precheck).
 *
 * Where a value was written is kept in a private parse state (cfg_parse_t), not in the
 * public struct: the cross checks that run after every key is known (top_k against
 * num_experts, the placement against the world size) still cite the offending node. */
#include "moe_config/config.h"

#include "config/config_int.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

/* ------------------------------------------------------------------------------------ */
/* The key table                                                                          */
/* ------------------------------------------------------------------------------------ */

typedef enum {
    CFG_INT,       /* int64_t (uint64_t for the seed: bounds keep it non-negative) */
    CFG_DOUBLE,    /* double, finite */
    CFG_BOOL,      /* bool: true | false */
    CFG_ENUM,      /* an int-sized enum whose value is the index of the name */
    CFG_STRING,    /* char[MOE_PATH_MAX] */
    CFG_PLACEMENT, /* placement.experts: `auto` or {rank: [expert ids]}; field placement_auto */
    CFG_RANKS,     /* profiler.profiled_ranks: `all` or [rank, ...]; field prof_all_ranks */
    CFG_LAYERS,    /* model.layers: `all` or [layer, ...]; field num_layer_ids */
    CFG_PLACEMENT_LAYERS, /* placement.layers: `none` or {layer: {rank: [ids]}}; field
                           * placement_per_layer */
} cfg_type_t;

typedef struct cfg_key {
    const char *path;         /* "section.leaf", as written in YAML */
    cfg_type_t type;
    const char *def;          /* default as YAML text: parsed by moe_cfg_defaults, printed */
    int64_t imin, imax;       /* CFG_INT bounds, inclusive */
    double dmin, dmax;        /* CFG_DOUBLE bounds, inclusive */
    const char *const *names; /* CFG_ENUM names, NULL-terminated; index = enum value */
    const char *unit;         /* "" when the value has none */
    const char *doc;          /* one line */
    size_t offset;            /* into moe_config_t */
    size_t size;              /* of that field, checked against the type */
} cfg_key_t;

static const char *const cfg_activation_names[] = {"swiglu", "gelu", "swiglu_oai", NULL};
static const char *const cfg_family_names[] = {"mixtral",     "qwen2_moe",   "qwen3_moe",
                                               "deepseek_v2", "deepseek_v3", "gpt_oss", NULL};
static const char *const cfg_topk_method_names[] = {"greedy", "group_limited_greedy",
                                                    "noaux_tc", NULL};
static const char *const cfg_dtype_names[] = {"f32", "bf16", "f16", "auto", NULL};
static const char *const cfg_num_dtype_names[] = {"auto", "f32", "bf16", NULL};
static const char *const cfg_routing_names[] = {"master", "symmetric", NULL};
static const char *const cfg_transport_names[] = {"mpi", "ucx", "nccl", NULL};
static const char *const cfg_device_names[] = {"cpu", "cuda", NULL};
static const char *const cfg_bind_names[] = {"auto", "none", "core", NULL};
static const char *const cfg_expert_hist_names[] = {"auto", "expert", "layer", NULL};

/* The name arrays above are indexed by enum value. */
_Static_assert(MOE_ACT_SWIGLU == 0 && MOE_ACT_GELU == 1 && MOE_ACT_SWIGLU_OAI == 2,
               "cfg_activation_names order");
_Static_assert(MOE_FAMILY_MIXTRAL == 0 && MOE_FAMILY_QWEN2_MOE == 1 && MOE_FAMILY_QWEN3_MOE == 2 &&
                   MOE_FAMILY_DEEPSEEK_V2 == 3 && MOE_FAMILY_DEEPSEEK_V3 == 4 &&
                   MOE_FAMILY_GPT_OSS == 5,
               "cfg_family_names order");
_Static_assert(MOE_TOPK_GREEDY == 0 && MOE_TOPK_GROUP_LIMITED == 1 && MOE_TOPK_NOAUX_TC == 2,
               "cfg_topk_method_names order");
_Static_assert(MOE_DTYPE_F32 == 0 && MOE_DTYPE_BF16 == 1 && MOE_DTYPE_F16 == 2 &&
                   MOE_DTYPE_AUTO == 3, "cfg_dtype_names order");
_Static_assert(MOE_NUM_AUTO == 0 && MOE_NUM_F32 == 1 && MOE_NUM_BF16 == 2,
               "cfg_num_dtype_names order");
_Static_assert(MOE_ROUTING_MASTER == 0 && MOE_ROUTING_SYMMETRIC == 1, "cfg_routing_names order");
_Static_assert(MOE_TRANSPORT_MPI == 0 && MOE_TRANSPORT_UCX == 1 && MOE_TRANSPORT_NCCL == 2,
               "cfg_transport_names order");
_Static_assert(MOE_DEVICE_CPU == 0 && MOE_DEVICE_CUDA == 1, "cfg_device_names order");
_Static_assert(MOE_BIND_AUTO == 0 && MOE_BIND_NONE == 1 && MOE_BIND_CORE == 2, "cfg_bind_names order");
_Static_assert(MOE_EXPERT_HIST_AUTO == 0 && MOE_EXPERT_HIST_EXPERT == 1 &&
               MOE_EXPERT_HIST_LAYER == 2, "cfg_expert_hist_names order");

#define CFG_FIELD(f) offsetof(moe_config_t, f), sizeof(((moe_config_t *)0)->f)
#define KEY_INT(p, f, d, lo, hi, unit, doc) \
    {p, CFG_INT, d, lo, hi, 0, 0, NULL, unit, doc, CFG_FIELD(f)}
#define KEY_DBL(p, f, d, lo, hi, unit, doc) \
    {p, CFG_DOUBLE, d, 0, 0, lo, hi, NULL, unit, doc, CFG_FIELD(f)}
#define KEY_BOOL(p, f, d, doc) {p, CFG_BOOL, d, 0, 0, 0, 0, NULL, "", doc, CFG_FIELD(f)}
#define KEY_ENUM(p, f, names, d, doc) {p, CFG_ENUM, d, 0, 0, 0, 0, names, "", doc, CFG_FIELD(f)}
#define KEY_STR(p, f, d, doc) {p, CFG_STRING, d, 0, 0, 0, 0, NULL, "", doc, CFG_FIELD(f)}
#define KEY_SPECIAL(p, type, f, d, doc) {p, type, d, 0, 0, 0, 0, NULL, "", doc, CFG_FIELD(f)}

/* Sections must stay contiguous: a section is identified by the index of its first key. */
static const cfg_key_t cfg_keys[] = {
    KEY_INT("model.hidden_dim", hidden_dim, "1024", 1, 65536, "", "width of a token vector"),
    KEY_INT("model.ffn_dim", ffn_dim, "3584", 1, 1048576, "", "inner width of each expert's FFN"),
    KEY_INT("model.num_experts", num_experts, "8", 1, MOE_MAX_EXPERTS, "", "experts per MoE layer"),
    KEY_INT("model.top_k", top_k, "2", 1, MOE_MAX_EXPERTS, "", "experts each token is sent to"),
    KEY_INT("model.num_layers", num_layers, "2", 1, MOE_MAX_LAYER_IDS, "",
            "MoE layers run per step"),
    KEY_ENUM("model.activation", activation, cfg_activation_names, "swiglu", "expert activation"),
    KEY_BOOL("model.normalize_topk", normalize_topk, "true",
             "renormalise the k gate weights to sum to 1, as Mixtral does"),
    KEY_DBL("model.capacity_factor", capacity_factor, "0", 0, 1024, "",
            "0 = no limit; else tokens over ceil(cf*T*k/E) per expert are dropped and counted"),
    KEY_STR("model.weights", weights, "random", "'random' or a path to a .safetensors file"),
    KEY_INT("model.first_layer", first_layer, "0", 0, 100000, "",
            "index in the weights file of moed's layer 0 (real models have dense layers first)"),
    KEY_ENUM("model.dtype", dtype, cfg_dtype_names, "auto",
             "how expert weights are held in memory; auto = the checkpoint's type (FP8 "
             "dequantised to bf16), f32 for random weights; f16 on the CPU is held as f32"),
    KEY_INT("model.seed", seed, "42", 0, INT64_MAX, "", "seed of random weights and inputs"),
    KEY_STR("model.checkpoint", checkpoint, "none",
            "'none' or a Hugging Face model directory (config.json + safetensors shards); its "
            "config.json sets the model keys, which the YAML may repeat but not contradict"),
    KEY_SPECIAL("model.layers", CFG_LAYERS, num_layer_ids, "all",
                "decoder layers whose MoE blocks run, in order, like [3, 4, 5]; 'all' = every "
                "MoE layer of the checkpoint (else model.num_layers from model.first_layer)"),
    KEY_ENUM("model.family", family, cfg_family_names, "mixtral",
             "routing, shared experts and tensor names (a checkpoint's config.json sets it)"),
    KEY_ENUM("model.topk_method", topk_method, cfg_topk_method_names, "greedy",
             "deepseek_v2 selection: greedy or group_limited_greedy; deepseek_v3: noaux_tc"),
    KEY_INT("model.n_group", n_group, "1", 1, MOE_MAX_EXPERTS, "",
            "expert groups (deepseek group-limited routing)"),
    KEY_INT("model.topk_group", topk_group, "1", 1, MOE_MAX_EXPERTS, "",
            "groups a token may pick experts from (deepseek)"),
    KEY_DBL("model.routed_scaling_factor", routed_scaling_factor, "1", 0, 1e6, "",
            "routed experts' weights are multiplied by this (deepseek)"),
    KEY_INT("model.n_shared_experts", n_shared_experts, "0", 0, 64, "",
            "shared experts every token runs on the routing rank (deepseek; qwen2_moe: 0 or 1)"),
    KEY_INT("model.shared_ffn_dim", shared_ffn_dim, "0", 0, 1048576, "",
            "inner width of the shared expert; 0 = model.ffn_dim * model.n_shared_experts"),
    KEY_DBL("model.swiglu_limit", swiglu_limit, "7", 0, 1e6, "",
            "gpt_oss: gate clamped to <= limit, up to [-limit, limit]"),

    KEY_INT("placement.master_rank", master_rank, "0", 0, MOE_MAX_RANKS - 1, "rank",
            "the rank that routes tokens in master routing"),
    KEY_SPECIAL("placement.experts", CFG_PLACEMENT, placement_auto, "auto",
                "'auto' (balanced contiguous blocks) or {rank: [expert ids], ...}; an expert "
                "listed under several ranks is replicated: its tokens are split between them"),
    KEY_SPECIAL("placement.layers", CFG_PLACEMENT_LAYERS, placement_per_layer, "none",
                "'none' or {layer: {rank: [expert ids]}, ...}: moed layer's own placement "
                "(layers 0..model.num_layers-1), overriding placement.experts for that layer"),

    KEY_ENUM("runtime.routing", routing, cfg_routing_names, "master",
             "master: one rank routes every token; symmetric: every rank routes its own"),
    KEY_ENUM("runtime.transport", transport, cfg_transport_names, "mpi",
             "how ranks exchange tokens"),
    KEY_ENUM("runtime.device", device, cfg_device_names, "cpu", "where experts run"),
    KEY_INT("runtime.threads", threads, "1", 1, 256, "threads",
            "BLAS (f32) and oneDNN (bf16, OpenMP) threads per rank"),
    KEY_ENUM("runtime.bind", bind, cfg_bind_names, "auto",
             "pin each rank's threads to runtime.threads cores of its own: core always; auto only when "
             "a node's ranks need more cores than it has and no one pinned them (ranks with experts "
             "first, one per core; the rest share); none never"),
    KEY_ENUM("runtime.compute_dtype", compute_dtype, cfg_num_dtype_names, "auto",
             "type of the expert GEMMs' inputs (F32 accumulation); auto = bf16 when the "
             "weights are bf16 and the CPU has native BF16 (or on cuda), else f32"),
    KEY_ENUM("runtime.wire_dtype", wire_dtype, cfg_num_dtype_names, "auto",
             "type of the rows exchanged between ranks; auto = the compute type (bf16 only "
             "when every rank computes in bf16)"),
    KEY_INT("runtime.chunks", chunks, "1", 1, 64, "",
            "pieces each step's rows are cut into, so one piece's exchange overlaps another's expert compute (1 = no overlap)"),
    KEY_DBL("runtime.step_timeout_s", step_timeout_s, "60", 0, 86400, "s",
            "watchdog on one step; 0 = off, else at least 1 (its pings wait 1 s for answers)"),
    KEY_INT("runtime.rebalance_every", rebalance_every, "0", 0, 1000000000, "steps",
            "online rebalancing: every N steps the ranks repack the experts from the last "
            "window's router counts and move weights between them (cpu only); 0 = off"),
    KEY_INT("runtime.redundant_experts", redundant_experts, "0", 0, MOE_MAX_EXPERTS, "",
            "online rebalancing: extra copies of the hottest experts per layer; each expert "
            "rank holds at most ceil((E + R) / expert ranks) experts per layer"),

    KEY_INT("workload.tokens_per_step", tokens_per_step, "2048", 1, 4194304, "tokens",
            "tokens routed per step; left out with a workload.input file: its rows"),
    KEY_INT("workload.steps", steps, "20", 0, 1000000000, "steps",
            "steps to run; 0 = until SIGINT or SIGTERM"),
    KEY_STR("workload.input", input, "random",
            "'random' or a .safetensors file holding tensor \"input\" [tokens, hidden_dim]"),
    KEY_DBL("workload.routing_skew", routing_skew, "0", 0, 16, "",
            "0 = the gate as it is; >0 biases the gate (random or a checkpoint's) toward a "
            "Zipf-like expert popularity with this exponent"),

    KEY_BOOL("profiler.enabled", prof_enabled, "true", "record per-step statistics"),
    KEY_INT("profiler.warmup_steps", prof_warmup_steps, "5", 0, 1000000000, "steps",
            "steps run but not recorded"),
    KEY_INT("profiler.wait_steps", prof_wait_steps, "0", 0, 1000000000, "steps",
            "idle steps before each measurement window"),
    KEY_INT("profiler.measurement_steps", prof_measurement_steps, "10", 1, 1000000000, "steps",
            "steps recorded per window"),
    KEY_INT("profiler.repeat", prof_repeat, "1", 0, 1000000000, "windows",
            "measurement windows; 0 = until the run ends"),
    KEY_INT("profiler.sampling_rate", prof_sampling_rate, "1", 1, 1000000, "steps",
            "record every Nth step inside a window"),
    KEY_SPECIAL("profiler.profiled_ranks", CFG_RANKS, prof_all_ranks, "all",
                "'all' or a sequence of ranks such as [0, 2]"),
    KEY_INT("profiler.memory_sample_ms", prof_memory_sample_ms, "50", 1, 60000, "ms",
            "period of the memory sampler"),
    KEY_BOOL("profiler.trace", prof_trace, "true", "write trace.json"),
    KEY_INT("profiler.trace_max_events", prof_trace_max_events, "1000000", 1000, 100000000,
            "events", "bound on trace.json events; extra events are counted as dropped"),
    KEY_INT("profiler.metrics_max_mb", prof_metrics_max_mb, "256", 0, 1048576, "MiB",
            "bound on metrics.csv (about 500 B per step); 0 = no bound; the report says at "
            "which step the file stopped"),
    KEY_STR("profiler.output_dir", prof_output_dir, "experiments",
            "directory for reports and traces"),
    KEY_STR("profiler.listen", prof_listen, "off",
            "rank 0's live HTTP endpoint, HOST:PORT (port 0: any free port); 'off' = none"),
    KEY_STR("profiler.control_token", prof_control_token, "none",
            "bearer token for POST /profile (or env MOED_CONTROL_TOKEN); 'none' = control off"),
    KEY_ENUM("profiler.expert_histograms", prof_expert_hist, cfg_expert_hist_names, "auto",
             "moed_expert_seconds per expert or per layer; auto: per expert while "
             "experts x layers <= 1024"),
};

#define CFG_NKEYS (sizeof(cfg_keys) / sizeof(cfg_keys[0]))

/* Config files are a few hundred bytes; anything this large is the wrong file. */
#define CFG_FILE_MAX ((size_t)16 << 20)
/* Longest user text quoted back in a message, so a message stays one readable line. */
#define CFG_QUOTE_MAX 48
/* Names longer than this are never close to a key: no suggestion, bounded work. */
#define CFG_NAME_MAX 64
/* Bounds on what libyaml is given to load (see yaml_precheck); a config needs depth 4. */
#define CFG_YAML_DEPTH_MAX 32
#define CFG_YAML_ANCHORS_MAX 256

static size_t key_section_len(const cfg_key_t *k)
{
    const char *dot = strchr(k->path, '.');
    return dot != NULL ? (size_t)(dot - k->path) : strlen(k->path);
}

static const char *key_leaf(const cfg_key_t *k)
{
    const char *dot = strchr(k->path, '.');
    return dot != NULL ? dot + 1 : k->path;
}

static bool key_same_section(const cfg_key_t *a, const cfg_key_t *b)
{
    size_t la = key_section_len(a);
    return la == key_section_len(b) && memcmp(a->path, b->path, la) == 0;
}

static const cfg_key_t *key_by_path(const char *path)
{
    for (size_t i = 0; i < CFG_NKEYS; i++) {
        if (strcmp(cfg_keys[i].path, path) == 0) {
            return &cfg_keys[i];
        }
    }
    return NULL;
}

/* Index of the first key of the section `name`, or -1. */
static int section_find(const char *name, size_t len)
{
    for (size_t i = 0; i < CFG_NKEYS; i++) {
        if (key_section_len(&cfg_keys[i]) == len && memcmp(cfg_keys[i].path, name, len) == 0) {
            return (int)i;
        }
    }
    return -1;
}

/* Index of the key `leaf` in the section starting at key `sec`, or -1. */
static int key_find(int sec, const char *leaf, size_t len)
{
    for (size_t i = (size_t)sec; i < CFG_NKEYS && key_same_section(&cfg_keys[i], &cfg_keys[sec]);
         i++) {
        const char *l = key_leaf(&cfg_keys[i]);
        if (strlen(l) == len && memcmp(l, leaf, len) == 0) {
            return (int)i;
        }
    }
    return -1;
}

/* ------------------------------------------------------------------------------------ */
/* Text helpers for messages                                                             */
/* ------------------------------------------------------------------------------------ */

/* Append printf-style text to buf (size n) at *pos, never overflowing; a full buffer
 * just stops growing. */
static void buf_add(char *buf, size_t n, size_t *pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void buf_add(char *buf, size_t n, size_t *pos, const char *fmt, ...)
{
    if (*pos >= n) {
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + *pos, n - *pos, fmt, ap);
    va_end(ap);
    if (w > 0) {
        *pos += (size_t)w < n - *pos ? (size_t)w : n - *pos - 1;
    }
}

/* Copy user text so it is safe in a one-line message: control bytes become \xNN, and
 * long text is cut (at a UTF-8 character boundary) with "...". */
static void text_clean(char *buf, size_t n, const char *s, size_t len)
{
    size_t pos = 0, cut = len > CFG_QUOTE_MAX ? CFG_QUOTE_MAX : len;
    while (cut < len && cut > 0 && ((unsigned char)s[cut] & 0xC0) == 0x80) {
        cut--; /* do not split a multi-byte character */
    }
    buf[0] = '\0';
    for (size_t i = 0; i < cut; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f) {
            buf_add(buf, n, &pos, "\\x%02x", c);
        } else {
            buf_add(buf, n, &pos, "%c", c);
        }
    }
    if (cut < len) {
        buf_add(buf, n, &pos, "...");
    }
}

/* "'two'", or "nothing" for an empty value. */
static void text_quote(char *buf, size_t n, const char *s, size_t len)
{
    char clean[4 * CFG_QUOTE_MAX + 8];
    if (len == 0) {
        snprintf(buf, n, "nothing");
        return;
    }
    text_clean(clean, sizeof(clean), s, len);
    snprintf(buf, n, "'%s'", clean);
}

static const char *node_text(const yaml_node_t *n)
{
    return (const char *)n->data.scalar.value;
}

/* What a node is, for "found ...": the quoted scalar, "a mapping" or "a sequence". */
static void node_describe(char *buf, size_t n, const yaml_node_t *node)
{
    if (node == NULL) {
        snprintf(buf, n, "nothing");
    } else if (node->type == YAML_MAPPING_NODE) {
        snprintf(buf, n, "a mapping");
    } else if (node->type == YAML_SEQUENCE_NODE) {
        snprintf(buf, n, "a sequence");
    } else {
        text_quote(buf, n, node_text(node), node->data.scalar.length);
    }
}

/* A YAML null: `key:` with nothing after it, `~` or `null`. Sections may be null. */
static bool node_is_null(const yaml_node_t *node)
{
    if (node->type != YAML_SCALAR_NODE || node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) {
        return false;
    }
    const char *s = node_text(node);
    return s[0] == '\0' || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 ||
           strcmp(s, "Null") == 0 || strcmp(s, "NULL") == 0;
}

static moe_cfg_mark_t mark_of_yaml(yaml_mark_t m)
{
    moe_cfg_mark_t r;
    r.line = m.line < (size_t)INT_MAX ? (int)m.line + 1 : INT_MAX;
    r.col = m.column < (size_t)INT_MAX ? (int)m.column + 1 : INT_MAX;
    return r;
}

static moe_cfg_mark_t node_mark(const yaml_node_t *node)
{
    return mark_of_yaml(node->start_mark);
}

static bool mark_before(moe_cfg_mark_t a, moe_cfg_mark_t b)
{
    return a.line < b.line || (a.line == b.line && a.col < b.col);
}

/* Edit distance, for "did you mean"; CFG_NAME_MAX + 1 when either name is too long. */
static size_t levenshtein(const char *a, size_t la, const char *b, size_t lb)
{
    size_t row[CFG_NAME_MAX + 1];
    if (la > CFG_NAME_MAX || lb > CFG_NAME_MAX) {
        return CFG_NAME_MAX + 1;
    }
    for (size_t j = 0; j <= lb; j++) {
        row[j] = j;
    }
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] == b[j - 1] ? 0 : 1);
            best = up + 1 < best ? up + 1 : best;
            best = row[j - 1] + 1 < best ? row[j - 1] + 1 : best;
            diag = up;
            row[j] = best;
        }
    }
    return row[lb];
}

/* Close enough to suggest: a typo or two, more for long names. */
static bool distance_close(size_t d, size_t len)
{
    size_t limit = len / 3 > 2 ? len / 3 : 2;
    return d <= limit;
}

const char *moe_cfg_suggest(const char *word, const char *const *names, size_t n)
{
    size_t len = strlen(word);
    const char *best = NULL;
    size_t best_d = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        size_t d = levenshtein(word, len, names[i], strlen(names[i]));
        if (d < best_d) {
            best_d = d;
            best = names[i];
        }
    }
    return best != NULL && distance_close(best_d, len) ? best : NULL;
}

/* The key closest to `leaf` typed in section `sec` (-1: typed at the top level). A key
 * in another section costs one edit more, so `runtime.top_k` suggests `model.top_k`. */
static const cfg_key_t *suggest_key(int sec, const char *leaf, size_t len)
{
    const cfg_key_t *best = NULL;
    size_t best_d = SIZE_MAX;
    for (size_t i = 0; i < CFG_NKEYS; i++) {
        const cfg_key_t *k = &cfg_keys[i];
        const char *l = key_leaf(k);
        size_t d = levenshtein(leaf, len, l, strlen(l));
        d += (sec >= 0 && key_same_section(k, &cfg_keys[sec])) ? 0 : 1;
        if (d < best_d) {
            best_d = d;
            best = k;
        }
    }
    return best != NULL && distance_close(best_d, len) ? best : NULL;
}

/* Index of the section closest to `name`, or -1. */
static int suggest_section(const char *name, size_t len)
{
    int best = -1;
    size_t best_d = SIZE_MAX;
    for (size_t i = 0; i < CFG_NKEYS; i++) {
        if (i > 0 && key_same_section(&cfg_keys[i], &cfg_keys[i - 1])) {
            continue;
        }
        size_t d = levenshtein(name, len, cfg_keys[i].path, key_section_len(&cfg_keys[i]));
        if (d < best_d) {
            best_d = d;
            best = (int)i;
        }
    }
    return best >= 0 && distance_close(best_d, len) ? best : -1;
}

/* "model, placement, runtime, workload, profiler" */
static void sections_list(char *buf, size_t n)
{
    size_t pos = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < CFG_NKEYS; i++) {
        if (i == 0 || !key_same_section(&cfg_keys[i], &cfg_keys[i - 1])) {
            buf_add(buf, n, &pos, "%s%.*s", i == 0 ? "" : ", ", (int)key_section_len(&cfg_keys[i]),
                    cfg_keys[i].path);
        }
    }
}

/* "hidden_dim, ffn_dim, ..." for the section starting at key `sec`. */
static void section_keys_list(char *buf, size_t n, int sec)
{
    size_t pos = 0;
    buf[0] = '\0';
    for (size_t i = (size_t)sec; i < CFG_NKEYS && key_same_section(&cfg_keys[i], &cfg_keys[sec]);
         i++) {
        buf_add(buf, n, &pos, "%s%s", i == (size_t)sec ? "" : ", ", key_leaf(&cfg_keys[i]));
    }
}

/* What a key accepts, for "expected ...". */
static void key_expected(char *buf, size_t n, const cfg_key_t *k)
{
    size_t pos = 0;
    buf[0] = '\0';
    switch (k->type) {
    case CFG_INT: buf_add(buf, n, &pos, "an integer"); break;
    case CFG_DOUBLE: buf_add(buf, n, &pos, "a number"); break;
    case CFG_BOOL: buf_add(buf, n, &pos, "true or false"); break;
    case CFG_STRING: buf_add(buf, n, &pos, "a non-empty string"); break;
    case CFG_PLACEMENT:
        buf_add(buf, n, &pos,
                "'auto' or a mapping rank -> [expert ids] like {1: [0, 1], 2: [2, 3]}");
        break;
    case CFG_RANKS: buf_add(buf, n, &pos, "'all' or a sequence of ranks like [0, 2]"); break;
    case CFG_LAYERS: buf_add(buf, n, &pos, "'all' or a sequence of layers like [3, 4, 5]"); break;
    case CFG_PLACEMENT_LAYERS:
        buf_add(buf, n, &pos,
                "'none' or a mapping layer -> {rank: [expert ids]} like {0: {1: [0, 1], 2: [2]}}");
        break;
    case CFG_ENUM:
        for (size_t i = 0; k->names[i] != NULL; i++) {
            const char *sep = i == 0 ? "" : (k->names[i + 1] == NULL ? " or " : ", ");
            buf_add(buf, n, &pos, "%s%s", sep, k->names[i]);
        }
        break;
    }
}

/* ------------------------------------------------------------------------------------ */
/* Scalar values: shared by the defaults and the loader                                  */
/* ------------------------------------------------------------------------------------ */

/* Decimal with an optional sign and nothing else: 0 ok, -1 not an integer, 1 overflow.
 * strtoll alone would take " 12", "12abc" (with an end check) and "0x1f" (base 0). */
static int parse_int64(const char *s, int64_t *out)
{
    const char *d = (s[0] == '-' || s[0] == '+') ? s + 1 : s;
    if (*d < '0' || *d > '9') {
        return -1;
    }
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end != '\0') {
        return -1;
    }
    if (errno == ERANGE) {
        return 1;
    }
    *out = (int64_t)v;
    return 0;
}

/* A finite number, all of the text consumed; -1 otherwise (nan, inf, junk, spaces). */
static int parse_double(const char *s, double *out)
{
    if (s[0] == '\0' || s[0] == ' ' || s[0] == '\t') {
        return -1;
    }
    char *end = NULL;
    double v = strtod(s, &end);
    if (*end != '\0' || !isfinite(v)) {
        return -1;
    }
    *out = v;
    return 0;
}

/* Each parse_* below: s is NUL-terminated with no NUL inside; on failure it writes the
 * message tail ("expected ..., found ..." or "... is out of range") to why. */
typedef struct cfg_why {
    char *buf;
    size_t n;
} cfg_why_t;

static bool why_expected(cfg_why_t why, const cfg_key_t *k, const char *s)
{
    char exp[256], found[4 * CFG_QUOTE_MAX + 16];
    key_expected(exp, sizeof(exp), k);
    text_quote(found, sizeof(found), s, strlen(s));
    snprintf(why.buf, why.n, "expected %s, found %s", exp, found);
    return false;
}

static bool why_range(cfg_why_t why, const char *s, const char *lo, const char *hi)
{
    char shown[4 * CFG_QUOTE_MAX + 8];
    text_clean(shown, sizeof(shown), s, strlen(s));
    snprintf(why.buf, why.n, "%s is out of range [%s, %s]", shown, lo, hi);
    return false;
}

static bool set_int(const cfg_key_t *k, const char *s, void *field, cfg_why_t why)
{
    int64_t v = 0;
    int rc = parse_int64(s, &v);
    if (rc < 0) {
        return why_expected(why, k, s);
    }
    if (rc > 0 || v < k->imin || v > k->imax) {
        char lo[32], hi[32];
        snprintf(lo, sizeof(lo), "%lld", (long long)k->imin);
        snprintf(hi, sizeof(hi), "%lld", (long long)k->imax);
        return why_range(why, s, lo, hi);
    }
    memcpy(field, &v, sizeof(v)); /* the seed is uint64_t: same bits, v >= 0 */
    return true;
}

static bool set_double(const cfg_key_t *k, const char *s, void *field, cfg_why_t why)
{
    double v = 0;
    if (parse_double(s, &v) != 0) {
        return why_expected(why, k, s);
    }
    if (v < k->dmin || v > k->dmax) {
        char lo[32], hi[32];
        snprintf(lo, sizeof(lo), "%g", k->dmin);
        snprintf(hi, sizeof(hi), "%g", k->dmax);
        return why_range(why, s, lo, hi);
    }
    memcpy(field, &v, sizeof(v));
    return true;
}

/* YAML 1.2 core booleans only: `yes`/`on` are YAML 1.1 surprises (the Norway problem). */
static bool set_bool(const cfg_key_t *k, const char *s, void *field, cfg_why_t why)
{
    bool v;
    if (strcmp(s, "true") == 0 || strcmp(s, "True") == 0 || strcmp(s, "TRUE") == 0) {
        v = true;
    } else if (strcmp(s, "false") == 0 || strcmp(s, "False") == 0 || strcmp(s, "FALSE") == 0) {
        v = false;
    } else {
        return why_expected(why, k, s);
    }
    memcpy(field, &v, sizeof(v));
    return true;
}

static bool set_enum(const cfg_key_t *k, const char *s, void *field, cfg_why_t why)
{
    for (int i = 0; k->names[i] != NULL; i++) {
        if (strcmp(s, k->names[i]) == 0) {
            memcpy(field, &i, sizeof(i)); /* table check: the enum field is int-sized */
            return true;
        }
    }
    return why_expected(why, k, s);
}

static bool set_string(const cfg_key_t *k, const char *s, void *field, cfg_why_t why)
{
    size_t len = strlen(s);
    if (len == 0) {
        return why_expected(why, k, s);
    }
    if (len >= MOE_PATH_MAX) {
        snprintf(why.buf, why.n, "the value is %zu bytes long; the limit is %d", len,
                 MOE_PATH_MAX - 1);
        return false;
    }
    memcpy(field, s, len + 1);
    return true;
}

/* The scalar forms of the two special keys; their mapping/sequence forms are nodes. */
static bool set_special(const cfg_key_t *k, const char *s, moe_config_t *cfg, cfg_why_t why)
{
    if (k->type == CFG_PLACEMENT && strcmp(s, "auto") == 0) {
        cfg->placement_auto = true;
        return true;
    }
    if (k->type == CFG_LAYERS && strcmp(s, "all") == 0) {
        cfg->num_layer_ids = 0;
        return true;
    }
    if (k->type == CFG_PLACEMENT_LAYERS && strcmp(s, "none") == 0) {
        cfg->placement_per_layer = false;
        return true;
    }
    if (k->type == CFG_RANKS && strcmp(s, "all") == 0) {
        cfg->prof_all_ranks = true;
        cfg->prof_num_ranks = 0;
        return true;
    }
    return why_expected(why, k, s);
}

/* Set key k in cfg from scalar text s (len bytes, NUL-terminated). */
static bool key_set_text(const cfg_key_t *k, const char *s, size_t len, moe_config_t *cfg,
                         cfg_why_t why)
{
    void *field = (char *)cfg + k->offset;
    if (strlen(s) != len) {
        /* A NUL inside a quoted scalar ("1\0"): show the bytes, never half the value. */
        char exp[256], found[4 * CFG_QUOTE_MAX + 16];
        key_expected(exp, sizeof(exp), k);
        text_quote(found, sizeof(found), s, len);
        snprintf(why.buf, why.n, "expected %s, found %s", exp, found);
        return false;
    }
    switch (k->type) {
    case CFG_INT: return set_int(k, s, field, why);
    case CFG_DOUBLE: return set_double(k, s, field, why);
    case CFG_BOOL: return set_bool(k, s, field, why);
    case CFG_ENUM: return set_enum(k, s, field, why);
    case CFG_STRING: return set_string(k, s, field, why);
    case CFG_PLACEMENT:
    case CFG_PLACEMENT_LAYERS:
    case CFG_RANKS:
    case CFG_LAYERS: return set_special(k, s, cfg, why);
    }
    return false;
}

void moe_cfg_defaults(moe_config_t *cfg)
{
    char why[256];
    if (cfg == NULL) {
        return;
    }
    memset(cfg, 0, sizeof(*cfg));
    for (size_t i = 0; i < CFG_NKEYS; i++) {
        /* Cannot fail: moe_cfg_table_check (run by the unit test) parses every default. */
        (void)key_set_text(&cfg_keys[i], cfg_keys[i].def, strlen(cfg_keys[i].def), cfg,
                           (cfg_why_t){why, sizeof(why)});
    }
    for (int e = 0; e < MOE_MAX_EXPERTS; e++) {
        cfg->expert_owner[e] = -1; /* unresolved until moe_cfg_parse knows the world */
    }
}

/* ------------------------------------------------------------------------------------ */
/* Table self-check                                                                       */
/* ------------------------------------------------------------------------------------ */

static size_t key_field_size(cfg_type_t t)
{
    switch (t) {
    case CFG_INT: return sizeof(int64_t);
    case CFG_DOUBLE: return sizeof(double);
    case CFG_BOOL:
    case CFG_PLACEMENT:
    case CFG_PLACEMENT_LAYERS:
    case CFG_RANKS: return sizeof(bool);
    case CFG_LAYERS: return sizeof(int32_t);
    case CFG_ENUM: return sizeof(int);
    case CFG_STRING: return MOE_PATH_MAX;
    }
    return 0;
}

/* NULL when entry i is well-formed, else what is wrong with it. */
static const char *key_check(size_t i, moe_config_t *scratch, char *why, size_t n)
{
    const cfg_key_t *k = &cfg_keys[i];
    const char *dot = strchr(k->path, '.');
    if (dot == NULL || dot == k->path || dot[1] == '\0' || strchr(dot + 1, '.') != NULL) {
        return "path is not 'section.leaf'";
    }
    if (k->size != key_field_size(k->type) || k->offset + k->size > sizeof(moe_config_t)) {
        return "field size does not match the type";
    }
    if (k->imin > k->imax || k->dmin > k->dmax || (k->type == CFG_ENUM && k->names == NULL)) {
        return "bad bounds or enum names";
    }
    for (size_t j = 0; j < i; j++) {
        if (strcmp(cfg_keys[j].path, k->path) == 0) {
            return "path declared twice";
        }
        if (key_same_section(&cfg_keys[j], k) && !key_same_section(&cfg_keys[i - 1], k)) {
            return "section is not contiguous in the table";
        }
    }
    if (!key_set_text(k, k->def, strlen(k->def), scratch, (cfg_why_t){why, n})) {
        return why;
    }
    return NULL;
}

moe_status_t moe_cfg_table_check(moe_error_t *err)
{
    char why[512];
    moe_status_t st = MOE_OK;
    moe_config_t *scratch = calloc(1, sizeof(*scratch));
    if (scratch == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "config table check: out of memory");
    }
    for (size_t i = 0; i < CFG_NKEYS && st == MOE_OK; i++) {
        const char *bad = key_check(i, scratch, why, sizeof(why));
        if (bad != NULL) {
            st = moe_error_set(err, MOE_ERR_INTERNAL, "config table: %s: %s", cfg_keys[i].path,
                               bad);
        }
    }
    free(scratch);
    return st;
}

size_t moe_cfg_table_size(void)
{
    return CFG_NKEYS;
}

/* ------------------------------------------------------------------------------------ */
/* The loader                                                                             */
/* ------------------------------------------------------------------------------------ */

/* Everything one parse needs; heap-allocated (the marks tables are ~100 KiB). The config
 * is built here and copied out only on success, so the caller's struct is untouched by
 * a failed parse. */
/* One (set, expert, rank) as written, with where. */
typedef struct cfg_entry {
    moe_cfg_replica_t r;
    moe_cfg_mark_t mark;
} cfg_entry_t;

typedef struct cfg_parse {
    const char *src;
    moe_error_t *err;
    const char *text; /* for turning a reader error's byte offset into line:col */
    size_t len;
    yaml_document_t *doc;
    moe_config_t cfg;
    moe_cfg_mark_t key_mark[CFG_NKEYS];     /* the key's name; line 0: not in the file */
    moe_cfg_mark_t val_mark[CFG_NKEYS];     /* its value */
    moe_cfg_mark_t section_mark[CFG_NKEYS]; /* indexed by the section's first key */
    /* placement.experts (set 0) and placement.layers (set l + 1) as written */
    int32_t num_ent;
    cfg_entry_t ent[MOE_MAX_REPLICA_ENTRIES];
    moe_cfg_mark_t rank_mark[MOE_MAX_RANKS];      /* rank keys of placement.experts */
    moe_cfg_mark_t lrank_mark[MOE_MAX_RANKS];     /* rank keys of the current layer's map */
    moe_cfg_mark_t pl_layer_mark[MOE_MAX_LAYER_IDS]; /* layer keys of placement.layers */
    moe_cfg_mark_t prof_rank_mark[MOE_MAX_RANKS]; /* entries of profiled_ranks, by rank */
    moe_cfg_mark_t layer_mark[MOE_MAX_LAYER_IDS]; /* entries of model.layers, in order */
    /* model.checkpoint's config.json: its path and the values it set, so a check that
     * fails on one of them names that file (exit 4), not the YAML */
    char ckpt_path[MOE_PATH_MAX];
    int num_ckpt_facts;
    moe_cfg_fact_t ckpt_facts[MOE_CFG_FACTS_MAX];
} cfg_parse_t;

/* Fail with `code`: "src:line:col: message", or "src: message" without a mark. */
static moe_status_t cfg_failv(cfg_parse_t *p, moe_status_t code, moe_cfg_mark_t m,
                              const char *fmt, va_list ap)
{
    char msg[MOE_ERROR_MSG_MAX];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    if (m.line > 0) {
        return moe_error_set(p->err, code, "%s:%d:%d: %s", p->src, m.line, m.col, msg);
    }
    return moe_error_set(p->err, code, "%s: %s", p->src, msg);
}

/* A config error (MOE_ERR_CONFIG, exit 3) at mark m. */
static moe_status_t cfg_fail(cfg_parse_t *p, moe_cfg_mark_t m, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static moe_status_t cfg_fail(cfg_parse_t *p, moe_cfg_mark_t m, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    moe_status_t st = cfg_failv(p, MOE_ERR_CONFIG, m, fmt, ap);
    va_end(ap);
    return st;
}

static yaml_node_t *doc_node(cfg_parse_t *p, int index)
{
    return yaml_document_get_node(p->doc, index);
}

/* A pair or item index libyaml did not resolve: cannot happen with a loaded document, but
 * the walk checks every index instead of trusting it. */
static moe_status_t node_missing(cfg_parse_t *p)
{
    return moe_error_set(p->err, MOE_ERR_INTERNAL, "%s: libyaml returned a dangling node",
                         p->src);
}

static int key_index(const cfg_key_t *k)
{
    return (int)(k - cfg_keys);
}

static moe_cfg_mark_t val_mark_of(cfg_parse_t *p, const char *path)
{
    const cfg_key_t *k = key_by_path(path);
    moe_cfg_mark_t none = {0, 0};
    return k != NULL ? p->val_mark[key_index(k)] : none;
}

static bool key_given(cfg_parse_t *p, const char *path)
{
    return val_mark_of(p, path).line > 0;
}

/* libyaml's own error: reader errors (bad UTF-8, control bytes) carry a byte offset,
 * the scanner and parser a mark. */
static moe_status_t yaml_fail(cfg_parse_t *p, const yaml_parser_t *ys)
{
    const char *problem = ys->problem != NULL ? ys->problem : "malformed YAML";
    if (ys->error == YAML_MEMORY_ERROR) {
        return moe_error_set(p->err, MOE_ERR_NO_MEMORY, "%s: out of memory while parsing YAML",
                             p->src);
    }
    if (ys->error == YAML_READER_ERROR) {
        moe_cfg_mark_t m = {1, 1};
        for (size_t i = 0; i < ys->problem_offset && i < p->len; i++) {
            bool nl = p->text[i] == '\n';
            m.line += nl ? 1 : 0;
            m.col = nl ? 1 : m.col + 1;
        }
        return cfg_fail(p, m, "YAML syntax error: %s (byte 0x%02x at offset %zu)", problem,
                        (unsigned)(ys->problem_value & 0xff), ys->problem_offset);
    }
    if (ys->context != NULL) {
        moe_cfg_mark_t cm = mark_of_yaml(ys->context_mark);
        return cfg_fail(p, mark_of_yaml(ys->problem_mark), "YAML syntax error: %s (%s at %d:%d)",
                        problem, ys->context, cm.line, cm.col);
    }
    return cfg_fail(p, mark_of_yaml(ys->problem_mark), "YAML syntax error: %s", problem);
}

/* A non-negative integer scalar below `limit` (an expert id or a rank). 0 ok; otherwise
 * the error is set, with `what` naming the value. */
static moe_status_t node_index(cfg_parse_t *p, const cfg_key_t *k, const yaml_node_t *node,
                               const char *what, int64_t limit, const char *units, int32_t *out)
{
    char found[4 * CFG_QUOTE_MAX + 16];
    int64_t v = 0;
    int rc = -1;
    moe_cfg_mark_t m = node_mark(node);
    if (node->type == YAML_SCALAR_NODE && strlen(node_text(node)) == node->data.scalar.length &&
        node_text(node)[0] != '-') {
        rc = parse_int64(node_text(node), &v); /* 1: too large for 64 bits */
    }
    if (rc < 0) {
        node_describe(found, sizeof(found), node);
        return cfg_fail(p, m, "%s: expected %s (an integer >= 0), found %s", k->path, what, found);
    }
    if (rc > 0 || v >= limit) {
        text_clean(found, sizeof(found), node_text(node), node->data.scalar.length);
        return cfg_fail(p, m, "%s: %s is beyond moed's limit of %lld %s", k->path, found,
                        (long long)limit, units);
    }
    *out = (int32_t)v;
    return MOE_OK;
}

/* One expert id listed under `rank` in placement set `set`. An expert under several ranks
 * is replicated; twice under one rank, ids beyond model.num_experts and coverage are
 * checked after every key is read (num_experts may come later). */
static moe_status_t placement_assign(cfg_parse_t *p, const cfg_key_t *k, int set, int32_t rank,
                                     const yaml_node_t *item)
{
    int32_t e = -1;
    moe_status_t st = node_index(p, k, item, "an expert id", MOE_MAX_EXPERTS, "experts", &e);
    if (st != MOE_OK) {
        return st;
    }
    if (p->num_ent >= MOE_MAX_REPLICA_ENTRIES - MOE_MAX_EXPERTS) {
        return cfg_fail(p, node_mark(item), "%s: more than %d (expert, rank) entries in all "
                        "placements: moed's limit", k->path,
                        MOE_MAX_REPLICA_ENTRIES - MOE_MAX_EXPERTS);
    }
    p->ent[p->num_ent++] = (cfg_entry_t){
        .r = {.set = (uint16_t)set, .expert = (uint16_t)e, .rank = rank}, .mark = node_mark(item)};
    return MOE_OK;
}

/* One `rank: [expert ids]` pair of placement.experts (set 0) or of one layer's map. */
static moe_status_t placement_rank(cfg_parse_t *p, const cfg_key_t *k, int set,
                                   const yaml_node_t *key, const yaml_node_t *val)
{
    char found[4 * CFG_QUOTE_MAX + 16];
    int32_t rank = -1;
    moe_status_t st = node_index(p, k, key, "a rank", MOE_MAX_RANKS, "ranks", &rank);
    if (st != MOE_OK) {
        return st;
    }
    moe_cfg_mark_t *marks = set == 0 ? p->rank_mark : p->lrank_mark;
    if (marks[rank].line > 0) {
        return cfg_fail(p, node_mark(key), "%s: rank %d is listed twice (first at line %d)",
                        k->path, rank, marks[rank].line);
    }
    marks[rank] = node_mark(key);
    if (val->type != YAML_SEQUENCE_NODE) {
        node_describe(found, sizeof(found), val);
        return cfg_fail(p, node_mark(val),
                        "%s: rank %d: expected a sequence of expert ids like [0, 1], found %s",
                        k->path, rank, found);
    }
    for (yaml_node_item_t *it = val->data.sequence.items.start;
         it < val->data.sequence.items.top && st == MOE_OK; it++) {
        const yaml_node_t *item = doc_node(p, *it);
        st = item != NULL ? placement_assign(p, k, set, rank, item) : node_missing(p);
    }
    return st;
}

/* A {rank: [expert ids]} map into placement set `set`. */
static moe_status_t placement_map(cfg_parse_t *p, const cfg_key_t *k, int set,
                                  const yaml_node_t *map)
{
    moe_status_t st = MOE_OK;
    for (yaml_node_pair_t *pair = map->data.mapping.pairs.start;
         pair < map->data.mapping.pairs.top && st == MOE_OK; pair++) {
        const yaml_node_t *key = doc_node(p, pair->key), *val = doc_node(p, pair->value);
        st = key != NULL && val != NULL ? placement_rank(p, k, set, key, val) : node_missing(p);
    }
    return st;
}

static moe_status_t placement_load(cfg_parse_t *p, const cfg_key_t *k, const yaml_node_t *map)
{
    p->cfg.placement_auto = false;
    return placement_map(p, k, 0, map);
}

/* placement.layers: {layer: {rank: [expert ids]}}; layers beyond the model are checked
 * once model.num_layers is known. */
static moe_status_t placement_layers_load(cfg_parse_t *p, const cfg_key_t *k,
                                          const yaml_node_t *map)
{
    char found[4 * CFG_QUOTE_MAX + 16];
    moe_status_t st = MOE_OK;
    p->cfg.placement_per_layer = true;
    for (yaml_node_pair_t *pair = map->data.mapping.pairs.start;
         pair < map->data.mapping.pairs.top && st == MOE_OK; pair++) {
        const yaml_node_t *key = doc_node(p, pair->key), *val = doc_node(p, pair->value);
        int32_t l = -1;
        if (key == NULL || val == NULL) {
            return node_missing(p);
        }
        st = node_index(p, k, key, "a layer", MOE_MAX_LAYER_IDS, "layers", &l);
        if (st != MOE_OK) {
            return st;
        }
        if (p->pl_layer_mark[l].line > 0) {
            return cfg_fail(p, node_mark(key), "%s: layer %d is listed twice (first at line %d)",
                            k->path, l, p->pl_layer_mark[l].line);
        }
        p->pl_layer_mark[l] = node_mark(key);
        if (val->type != YAML_MAPPING_NODE) {
            node_describe(found, sizeof(found), val);
            return cfg_fail(p, node_mark(val), "%s: layer %d: expected a mapping rank -> [expert "
                            "ids] like {1: [0, 1], 2: [2, 3]}, found %s", k->path, l, found);
        }
        memset(p->lrank_mark, 0, sizeof(p->lrank_mark));
        st = placement_map(p, k, l + 1, val);
    }
    return st;
}

/* profiler.profiled_ranks as a sequence; ranks beyond the world are checked later. */
static moe_status_t ranks_load(cfg_parse_t *p, const cfg_key_t *k, const yaml_node_t *seq)
{
    moe_config_t *c = &p->cfg;
    c->prof_all_ranks = false;
    c->prof_num_ranks = 0;
    for (yaml_node_item_t *it = seq->data.sequence.items.start; it < seq->data.sequence.items.top;
         it++) {
        const yaml_node_t *item = doc_node(p, *it);
        int32_t r = -1;
        if (item == NULL) {
            return node_missing(p);
        }
        moe_status_t st = node_index(p, k, item, "a rank", MOE_MAX_RANKS, "ranks", &r);
        if (st != MOE_OK) {
            return st;
        }
        if (p->prof_rank_mark[r].line > 0) {
            return cfg_fail(p, node_mark(item), "%s: rank %d is listed twice (first at line %d)",
                            k->path, r, p->prof_rank_mark[r].line);
        }
        p->prof_rank_mark[r] = node_mark(item);
        c->prof_ranks[c->prof_num_ranks++] = r; /* < MOE_MAX_RANKS: each rank at most once */
    }
    return MOE_OK;
}

/* model.layers as a sequence of decoder layer indices; checked against the model later. */
static moe_status_t layers_load(cfg_parse_t *p, const cfg_key_t *k, const yaml_node_t *seq)
{
    moe_config_t *c = &p->cfg;
    c->num_layer_ids = 0;
    for (yaml_node_item_t *it = seq->data.sequence.items.start; it < seq->data.sequence.items.top;
         it++) {
        const yaml_node_t *item = doc_node(p, *it);
        int32_t l = -1;
        if (item == NULL) {
            return node_missing(p);
        }
        moe_status_t st = node_index(p, k, item, "a layer", MOE_MAX_LAYER_IDS, "layers", &l);
        if (st != MOE_OK) {
            return st;
        }
        for (int i = 0; i < c->num_layer_ids; i++) {
            if (c->layer_ids[i] == l) {
                return cfg_fail(p, node_mark(item),
                                "%s: layer %d is listed twice (first at line %d)", k->path, l,
                                p->layer_mark[i].line);
            }
        }
        p->layer_mark[c->num_layer_ids] = node_mark(item);
        c->layer_ids[c->num_layer_ids++] = l; /* distinct and < MOE_MAX_LAYER_IDS */
    }
    if (c->num_layer_ids == 0) {
        return cfg_fail(p, node_mark(seq), "%s: the list is empty; write 'all' or name layers",
                        k->path);
    }
    return MOE_OK;
}

/* Set key k from its value node. */
static moe_status_t key_load(cfg_parse_t *p, const cfg_key_t *k, const yaml_node_t *val)
{
    char why[MOE_ERROR_MSG_MAX / 2], exp[256], found[4 * CFG_QUOTE_MAX + 16];
    if (k->type == CFG_PLACEMENT && val->type == YAML_MAPPING_NODE) {
        return placement_load(p, k, val);
    }
    if (k->type == CFG_PLACEMENT_LAYERS && val->type == YAML_MAPPING_NODE) {
        return placement_layers_load(p, k, val);
    }
    if (k->type == CFG_LAYERS && val->type == YAML_SEQUENCE_NODE) {
        return layers_load(p, k, val);
    }
    if (k->type == CFG_RANKS && val->type == YAML_SEQUENCE_NODE) {
        return ranks_load(p, k, val);
    }
    if (val->type != YAML_SCALAR_NODE) {
        key_expected(exp, sizeof(exp), k);
        node_describe(found, sizeof(found), val);
        return cfg_fail(p, node_mark(val), "%s: expected %s, found %s", k->path, exp, found);
    }
    if (!key_set_text(k, node_text(val), val->data.scalar.length, &p->cfg,
                      (cfg_why_t){why, sizeof(why)})) {
        return cfg_fail(p, node_mark(val), "%s: %s", k->path, why);
    }
    return MOE_OK;
}

static moe_status_t unknown_key(cfg_parse_t *p, int sec, const yaml_node_t *key)
{
    char name[4 * CFG_QUOTE_MAX + 8], keys[512];
    const cfg_key_t *s = &cfg_keys[sec];
    const char *leaf = node_text(key);
    size_t len = key->data.scalar.length;
    const cfg_key_t *hint = suggest_key(sec, leaf, len);
    text_clean(name, sizeof(name), leaf, len);
    if (hint != NULL) {
        return cfg_fail(p, node_mark(key), "unknown key '%.*s.%s' (did you mean '%s'?)",
                        (int)key_section_len(s), s->path, name, hint->path);
    }
    section_keys_list(keys, sizeof(keys), sec);
    return cfg_fail(p, node_mark(key), "unknown key '%.*s.%s'; the keys of section '%.*s' are %s",
                    (int)key_section_len(s), s->path, name, (int)key_section_len(s), s->path,
                    keys);
}

/* libyaml's marks count characters from after a byte-order mark; the text is UTF-8 (a
 * UTF-16 text is left unplaced: -1). The byte where character `index` starts. */
static int64_t char_to_byte(const char *text, size_t len, size_t index)
{
    const unsigned char *b = (const unsigned char *)text;
    size_t i = 0;
    if (len >= 2 && ((b[0] == 0xFE && b[1] == 0xFF) || (b[0] == 0xFF && b[1] == 0xFE))) {
        return -1;
    }
    if (len >= 3 && b[0] == 0xEF && b[1] == 0xBB && b[2] == 0xBF) {
        i = 3;
    }
    for (size_t chars = 0; i < len; i++) {
        if ((b[i] & 0xC0) != 0x80 && chars++ == index) {
            return (int64_t)i;
        }
    }
    return (int64_t)len; /* the index just past the last character */
}

/* Where profiler.control_token's value is written (moe_cfg_redacted_text): its node's
 * span past any anchor or tag; an alias's is the anchored node's, the secret's one copy. */
static void token_span_of(cfg_parse_t *p, const yaml_node_t *val)
{
    int64_t a = char_to_byte(p->text, p->len, val->start_mark.index);
    int64_t b = char_to_byte(p->text, p->len, val->end_mark.index);
    bool ok = a >= 0 && b >= a; /* empty: nothing to hide */
    while (ok && a < b && (p->text[a] == '&' || p->text[a] == '!')) {
        /* the node's span starts at its anchor or tag: those are names, not the value */
        while (a < b && p->text[a] != ' ' && p->text[a] != '\t' && p->text[a] != '\n' &&
               p->text[a] != '\r') {
            a++;
        }
        while (a < b && (p->text[a] == ' ' || p->text[a] == '\t')) {
            a++;
        }
    }
    p->cfg.token_span[0] = ok ? a : -1;
    p->cfg.token_span[1] = ok ? b : -1;
}

/* One `key: value` pair inside the section starting at key `sec`. */
static moe_status_t key_pair_load(cfg_parse_t *p, int sec, const yaml_node_t *key,
                                  const yaml_node_t *val)
{
    char found[4 * CFG_QUOTE_MAX + 16];
    int section_len = (int)key_section_len(&cfg_keys[sec]);
    if (key->type != YAML_SCALAR_NODE) {
        node_describe(found, sizeof(found), key);
        return cfg_fail(p, node_mark(key), "section '%.*s': expected a key name, found %s",
                        section_len, cfg_keys[sec].path, found);
    }
    int i = key_find(sec, node_text(key), key->data.scalar.length);
    if (i < 0) {
        return unknown_key(p, sec, key);
    }
    if (p->key_mark[i].line > 0) {
        return cfg_fail(p, node_mark(key), "%s: duplicate key (first set at line %d); keep one",
                        cfg_keys[i].path, p->key_mark[i].line);
    }
    p->key_mark[i] = node_mark(key);
    p->val_mark[i] = node_mark(val);
    if (strcmp(cfg_keys[i].path, "profiler.control_token") == 0) {
        token_span_of(p, val);
    }
    return key_load(p, &cfg_keys[i], val);
}

static moe_status_t unknown_section(cfg_parse_t *p, const yaml_node_t *key)
{
    char name[4 * CFG_QUOTE_MAX + 8], sections[256];
    const char *s = node_text(key);
    size_t len = key->data.scalar.length;
    int hint = suggest_section(s, len);
    const cfg_key_t *khint = hint < 0 ? suggest_key(-1, s, len) : NULL;
    text_clean(name, sizeof(name), s, len);
    if (hint >= 0) {
        return cfg_fail(p, node_mark(key), "unknown section '%s' (did you mean '%.*s'?)", name,
                        (int)key_section_len(&cfg_keys[hint]), cfg_keys[hint].path);
    }
    if (khint != NULL) { /* a key written at the top level, outside its section */
        return cfg_fail(p, node_mark(key), "unknown section '%s' (did you mean '%s'?)", name,
                        khint->path);
    }
    sections_list(sections, sizeof(sections));
    return cfg_fail(p, node_mark(key), "unknown section '%s'; the sections are %s", name,
                    sections);
}

/* One `section: {keys}` pair of the top-level mapping. */
static moe_status_t section_load(cfg_parse_t *p, const yaml_node_t *key, const yaml_node_t *val)
{
    char found[4 * CFG_QUOTE_MAX + 16];
    moe_status_t st = MOE_OK;
    if (key->type != YAML_SCALAR_NODE) {
        node_describe(found, sizeof(found), key);
        return cfg_fail(p, node_mark(key), "expected a section name, found %s", found);
    }
    int sec = section_find(node_text(key), key->data.scalar.length);
    if (sec < 0) {
        return unknown_section(p, key);
    }
    int section_len = (int)key_section_len(&cfg_keys[sec]);
    if (p->section_mark[sec].line > 0) {
        return cfg_fail(p, node_mark(key),
                        "duplicate section '%.*s' (first at line %d); merge them", section_len,
                        cfg_keys[sec].path, p->section_mark[sec].line);
    }
    p->section_mark[sec] = node_mark(key);
    if (node_is_null(val)) {
        return MOE_OK; /* `model:` with nothing under it: all defaults */
    }
    if (val->type != YAML_MAPPING_NODE) {
        node_describe(found, sizeof(found), val);
        return cfg_fail(p, node_mark(val),
                        "section '%.*s' must be a mapping of keys (like key: value), found %s",
                        section_len, cfg_keys[sec].path, found);
    }
    for (yaml_node_pair_t *pair = val->data.mapping.pairs.start;
         pair < val->data.mapping.pairs.top && st == MOE_OK; pair++) {
        const yaml_node_t *k = doc_node(p, pair->key), *v = doc_node(p, pair->value);
        st = k != NULL && v != NULL ? key_pair_load(p, sec, k, v) : node_missing(p);
    }
    return st;
}

static moe_status_t document_load(cfg_parse_t *p)
{
    char found[4 * CFG_QUOTE_MAX + 16], sections[256];
    moe_status_t st = MOE_OK;
    const yaml_node_t *root = yaml_document_get_root_node(p->doc);
    if (root == NULL || node_is_null(root)) {
        /* No document, or one that is nothing but a null: a truncated copy, a failed
         * redirect or the wrong file, never a deliberate "all defaults" (`{}` or sections
         * set to null still say that, and stay valid). */
        return cfg_fail(p, (moe_cfg_mark_t){0},
                        "the file is empty (no configuration keys): start from "
                        "configs/experts.yaml, or write `{}` to run every default "
                        "(moed --help-config lists the keys)");
    }
    if (root->type != YAML_MAPPING_NODE) {
        node_describe(found, sizeof(found), root);
        sections_list(sections, sizeof(sections));
        return cfg_fail(p, node_mark(root),
                        "the top level must be a mapping of sections (%s), found %s", sections,
                        found);
    }
    for (yaml_node_pair_t *pair = root->data.mapping.pairs.start;
         pair < root->data.mapping.pairs.top && st == MOE_OK; pair++) {
        const yaml_node_t *k = doc_node(p, pair->key), *v = doc_node(p, pair->value);
        st = k != NULL && v != NULL ? section_load(p, k, v) : node_missing(p);
    }
    return st;
}

/* libyaml's scanner spends O(flow depth) per token and its loader O(anchors) per anchor
 * and alias, so 100 000 '[' take seconds and a fuzzer's input can take hours. This event
 * pass bounds both and stops at the first excess, so the load after it is linear. It also
 * refuses a second document: ignoring the rest of a file would hide edits. */
static moe_status_t yaml_event_check(cfg_parse_t *p, const yaml_event_t *ev, int *depth,
                                     int *anchors, int *docs)
{
    const yaml_char_t *anchor = NULL;
    moe_cfg_mark_t m = mark_of_yaml(ev->start_mark);
    switch (ev->type) {
    case YAML_DOCUMENT_START_EVENT:
        if (++*docs > 1) {
            return cfg_fail(p, m, "a second YAML document ('---'); a config file holds one");
        }
        break;
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT:
        anchor = ev->type == YAML_SEQUENCE_START_EVENT ? ev->data.sequence_start.anchor
                                                       : ev->data.mapping_start.anchor;
        if (++*depth > CFG_YAML_DEPTH_MAX) {
            return cfg_fail(p, m, "YAML nesting is deeper than %d levels; a moed config needs 4",
                            CFG_YAML_DEPTH_MAX);
        }
        break;
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT: --*depth; break;
    case YAML_SCALAR_EVENT: anchor = ev->data.scalar.anchor; break;
    default: break;
    }
    if (anchor != NULL && ++*anchors > CFG_YAML_ANCHORS_MAX) {
        return cfg_fail(p, m, "more than %d YAML anchors (&name); a moed config needs a few",
                        CFG_YAML_ANCHORS_MAX);
    }
    return MOE_OK;
}

static moe_status_t yaml_precheck(cfg_parse_t *p, const unsigned char *text, size_t len)
{
    yaml_parser_t ys;
    yaml_event_t ev;
    int depth = 0, anchors = 0, docs = 0;
    bool done = false;
    moe_status_t st = MOE_OK;
    if (!yaml_parser_initialize(&ys)) {
        return moe_error_set(p->err, MOE_ERR_NO_MEMORY, "%s: out of memory starting libyaml",
                             p->src);
    }
    yaml_parser_set_input_string(&ys, text, len);
    while (st == MOE_OK && !done) {
        if (!yaml_parser_parse(&ys, &ev)) {
            st = yaml_fail(p, &ys);
            break;
        }
        st = yaml_event_check(p, &ev, &depth, &anchors, &docs);
        done = ev.type == YAML_STREAM_END_EVENT;
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&ys);
    return st;
}

/* Load the (single, bounded: see yaml_precheck) document and walk it. */
static moe_status_t yaml_load(cfg_parse_t *p, const unsigned char *text, size_t len)
{
    yaml_parser_t ys;
    yaml_document_t doc;
    moe_status_t st;
    if (!yaml_parser_initialize(&ys)) {
        return moe_error_set(p->err, MOE_ERR_NO_MEMORY, "%s: out of memory starting libyaml",
                             p->src);
    }
    yaml_parser_set_input_string(&ys, text, len);
    if (!yaml_parser_load(&ys, &doc)) {
        st = yaml_fail(p, &ys); /* libyaml has already freed doc */
        goto out_parser;
    }
    p->doc = &doc;
    st = document_load(p);
    p->doc = NULL;
    yaml_document_delete(&doc);
out_parser:
    yaml_parser_delete(&ys);
    return st;
}

/* ------------------------------------------------------------------------------------ */
/* Cross checks, once every key is known                                                  */
/* ------------------------------------------------------------------------------------ */

/* The fact of model.checkpoint's config.json that set the key `path` (the YAML does not
 * give it), or NULL. */
static const moe_cfg_fact_t *ckpt_fact_of(const cfg_parse_t *p, const char *path)
{
    for (int i = 0; i < p->num_ckpt_facts; i++) {
        if (strcmp(p->ckpt_facts[i].path, path) == 0) {
            return &p->ckpt_facts[i];
        }
    }
    return NULL;
}

/* A check failed on the value of `path`: the YAML's error at its mark (exit 3) when the
 * YAML gives it; when config.json set it, that file's error (MOE_ERR_WEIGHTS, exit 4)
 * naming the key it came from; else the YAML's at mark `m`. */
static moe_status_t key_fail(cfg_parse_t *p, const char *path, moe_cfg_mark_t m,
                             const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static moe_status_t key_fail(cfg_parse_t *p, const char *path, moe_cfg_mark_t m,
                             const char *fmt, ...)
{
    char msg[MOE_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    const moe_cfg_fact_t *f = key_given(p, path) ? NULL : ckpt_fact_of(p, path);
    if (f == NULL) {
        moe_status_t st = cfg_failv(p, MOE_ERR_CONFIG, key_given(p, path) ?
                                    val_mark_of(p, path) : m, fmt, ap);
        va_end(ap);
        return st;
    }
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return moe_error_set(p->err, MOE_ERR_WEIGHTS, "%s: %s (%s is this file's %s %s)",
                         p->ckpt_path, msg, path, f->source, f->value);
}

static moe_status_t check_top_k(cfg_parse_t *p)
{
    const moe_config_t *c = &p->cfg;
    if (c->top_k <= c->num_experts) {
        return MOE_OK;
    }
    const moe_cfg_fact_t *fk = key_given(p, "model.top_k") ? NULL : ckpt_fact_of(p, "model.top_k");
    if (fk != NULL) { /* the checkpoint contradicts itself: the YAML cannot fix that */
        const moe_cfg_fact_t *fe = ckpt_fact_of(p, "model.num_experts");
        return moe_error_set(p->err, MOE_ERR_WEIGHTS, "%s: %s %s is more than %s %lld "
                             "(moed's model.top_k and model.num_experts): a token cannot "
                             "choose more experts than a layer has; check the file",
                             p->ckpt_path, fk->source, fk->value,
                             fe != NULL ? fe->source : "model.num_experts",
                             (long long)c->num_experts);
    }
    moe_cfg_mark_t m = val_mark_of(p, "model.top_k");
    if (m.line == 0) {
        m = val_mark_of(p, "model.num_experts"); /* top_k is the default: num_experts shrank */
    }
    return cfg_fail(p, m,
                    "model.top_k: %lld is more than model.num_experts (%lld); set top_k to at "
                    "most %lld or add experts",
                    (long long)c->top_k, (long long)c->num_experts, (long long)c->num_experts);
}

/* "the job has 3 ranks (0..2)" */
static void world_text(char *buf, size_t n, int world)
{
    snprintf(buf, n, "the job has %d rank%s (0..%d)", world, world == 1 ? "" : "s", world - 1);
}

static const char *set_path(int set)
{
    return set == 0 ? "placement.experts" : "placement.layers";
}

/* Set, expert, rank, then file order: an expert's copies become adjacent, the first
 * written first. */
static int entry_cmp(const void *pa, const void *pb)
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
    return mark_before(a->mark, b->mark) ? -1 : mark_before(b->mark, a->mark) ? 1 : 0;
}

/* A rank holds one copy of an expert: the same id twice under one rank is a mistake. */
static moe_status_t check_twice_on_rank(cfg_parse_t *p)
{
    for (int i = 1; i < p->num_ent; i++) {
        const moe_cfg_replica_t *a = &p->ent[i - 1].r, *b = &p->ent[i].r;
        if (a->set == b->set && a->expert == b->expert && a->rank == b->rank) {
            char where[48] = "";
            if (b->set > 0) {
                snprintf(where, sizeof(where), " of layer %d", b->set - 1);
            }
            return cfg_fail(p, p->ent[i].mark,
                            "%s: expert %d is listed twice under rank %d%s (first at line %d); "
                            "a rank holds one copy of an expert (replicas go on other ranks)",
                            set_path(b->set), b->expert, (int)b->rank, where,
                            p->ent[i - 1].mark.line);
        }
    }
    return MOE_OK;
}

/* Explicit expert ids must name experts of the model: report the first such id in the file. */
static moe_status_t check_expert_ids(cfg_parse_t *p)
{
    int64_t ne = p->cfg.num_experts;
    int bad = -1;
    for (int i = 0; i < p->num_ent; i++) {
        if (p->ent[i].r.expert >= ne && (bad < 0 || mark_before(p->ent[i].mark, p->ent[bad].mark))) {
            bad = i;
        }
    }
    if (bad < 0) {
        return MOE_OK;
    }
    return cfg_fail(p, p->ent[bad].mark,
                    "%s: expert %d does not exist: model.num_experts is %lld (ids 0..%lld)",
                    set_path(p->ent[bad].r.set), p->ent[bad].r.expert, (long long)ne,
                    (long long)ne - 1);
}

/* placement.layers names moed layers 0..num_layers-1. */
static moe_status_t check_layer_keys(cfg_parse_t *p)
{
    int64_t nl = p->cfg.num_layers;
    for (int64_t l = nl; l < MOE_MAX_LAYER_IDS; l++) {
        if (p->pl_layer_mark[l].line > 0) {
            return cfg_fail(p, p->pl_layer_mark[l],
                            "placement.layers: layer %lld does not exist: the run has %lld MoE "
                            "layers (0..%lld)", (long long)l, (long long)nl, (long long)nl - 1);
        }
    }
    return MOE_OK;
}

/* Rank keys beyond the world: report the first in the file. */
static moe_status_t check_placement_ranks(cfg_parse_t *p, int world)
{
    char wt[64];
    int bad = -1;
    moe_cfg_mark_t bm = {0, 0};
    for (int r = world; r < MOE_MAX_RANKS; r++) {
        bool listed = p->rank_mark[r].line > 0;
        if (listed && (bad < 0 || mark_before(p->rank_mark[r], bm))) {
            bad = r;
            bm = p->rank_mark[r];
        }
    }
    const char *path = "placement.experts";
    for (int i = 0; i < p->num_ent; i++) { /* layers' maps: cite the first id under it */
        const cfg_entry_t *x = &p->ent[i];
        if (x->r.set > 0 && x->r.rank >= world && (bad < 0 || mark_before(x->mark, bm))) {
            bad = x->r.rank;
            bm = x->mark;
            path = "placement.layers";
        }
    }
    if (bad < 0) {
        return MOE_OK;
    }
    world_text(wt, sizeof(wt), world);
    return cfg_fail(p, bm,
                    "%s: rank %d does not exist: %s; list experts only under ranks that exist, "
                    "or use 'auto'", path, bad, wt);
}

/* Every expert needs a rank in set `set` (entries sorted); list the ones without (the list
 * is cut to fit one line). */
static moe_status_t check_set_covered(cfg_parse_t *p, int set, moe_cfg_mark_t m)
{
    char ids[512], where[48] = "";
    size_t pos = 0;
    int missing = 0, i = 0;
    int64_t ne = p->cfg.num_experts;
    ids[0] = '\0';
    while (i < p->num_ent && p->ent[i].r.set < set) {
        i++;
    }
    for (int64_t e = 0; e < ne; e++) {
        bool has = i < p->num_ent && p->ent[i].r.set == set && p->ent[i].r.expert == e;
        while (i < p->num_ent && p->ent[i].r.set == set && p->ent[i].r.expert == e) {
            i++;
        }
        if (!has) {
            if (missing < 32) {
                buf_add(ids, sizeof(ids), &pos, "%s%lld", missing == 0 ? "" : " ", (long long)e);
            }
            missing++;
        }
    }
    if (missing == 0) {
        return MOE_OK;
    }
    if (missing > 32) {
        buf_add(ids, sizeof(ids), &pos, " ... (%d in all)", missing);
    }
    if (set > 0) {
        snprintf(where, sizeof(where), "layer %d: ", set - 1);
    }
    return cfg_fail(p, m,
                    "%s: %s%s %s %s assigned to no rank; each of the %lld experts (0..%lld) "
                    "needs at least one rank", set_path(set), where,
                    missing == 1 ? "expert" : "experts", ids, missing == 1 ? "is" : "are",
                    (long long)ne, (long long)ne - 1);
}

static moe_status_t check_experts_covered(cfg_parse_t *p)
{
    moe_status_t st = MOE_OK;
    if (!p->cfg.placement_auto) {
        st = check_set_covered(p, 0, val_mark_of(p, "placement.experts"));
    }
    for (int l = 0; st == MOE_OK && l < MOE_MAX_LAYER_IDS; l++) {
        if (p->pl_layer_mark[l].line > 0) {
            st = check_set_covered(p, l + 1, p->pl_layer_mark[l]);
        }
    }
    return st;
}

/* The CUDA back-end uploads every layer's experts as one (layer x local count) table and
 * has not been run with copies split between ranks: refuse what it was not built for
 * rather than run it wrong. */
static moe_status_t check_placement_cuda(cfg_parse_t *p)
{
    if (p->cfg.device != MOE_DEVICE_CUDA) {
        return MOE_OK;
    }
    for (int l = 0; l < MOE_MAX_LAYER_IDS; l++) {
        if (p->pl_layer_mark[l].line > 0) {
            return cfg_fail(p, val_mark_of(p, "placement.layers"), "placement.layers: not "
                            "supported with runtime.device: cuda yet (the GPU back-end holds "
                            "the same experts in every layer); use runtime.device: cpu, or one "
                            "placement.experts for every layer");
        }
    }
    for (int i = 1; i < p->num_ent; i++) {
        const moe_cfg_replica_t *a = &p->ent[i - 1].r, *b = &p->ent[i].r;
        if (a->set == 0 && b->set == 0 && a->expert == b->expert) {
            return cfg_fail(p, p->ent[i].mark, "placement.experts: expert %d is listed under "
                            "ranks %d and %d: replicas are not supported with runtime.device: "
                            "cuda yet; use runtime.device: cpu, or give each expert one rank",
                            (int)b->expert, (int)a->rank, (int)b->rank);
        }
    }
    return MOE_OK;
}

static moe_status_t check_placement(cfg_parse_t *p, int world)
{
    qsort(p->ent, (size_t)p->num_ent, sizeof(p->ent[0]), entry_cmp);
    moe_status_t st = check_twice_on_rank(p);
    if (st == MOE_OK) {
        st = check_expert_ids(p);
    }
    if (st == MOE_OK) {
        st = check_layer_keys(p);
    }
    if (st == MOE_OK && world > 1) { /* one rank hosts everything: rank keys don't matter */
        st = check_placement_ranks(p, world);
    }
    if (st == MOE_OK) {
        st = check_experts_covered(p);
    }
    if (st == MOE_OK && world > 1) {
        st = check_placement_cuda(p);
    }
    return st;
}

/* master_rank and profiled_ranks must exist; with one rank both are moot (see header). */
static moe_status_t check_ranks(cfg_parse_t *p, int world)
{
    char wt[64];
    const moe_config_t *c = &p->cfg;
    if (world == 1) {
        return MOE_OK;
    }
    world_text(wt, sizeof(wt), world);
    if (c->master_rank >= world) {
        return cfg_fail(p, val_mark_of(p, "placement.master_rank"),
                        "placement.master_rank: rank %lld does not exist: %s",
                        (long long)c->master_rank, wt);
    }
    for (int i = 0; !c->prof_all_ranks && i < c->prof_num_ranks; i++) {
        int32_t r = c->prof_ranks[i];
        if (r >= world) {
            return cfg_fail(p, p->prof_rank_mark[r],
                            "profiler.profiled_ranks: rank %d does not exist: %s", (int)r, wt);
        }
    }
    return MOE_OK;
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
static void placement_resolve(cfg_parse_t *p, int world)
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
    qsort(p->ent, (size_t)p->num_ent, sizeof(p->ent[0]), entry_cmp);
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
}

/* ------------------------------------------------------------------------------------ */
/* model.checkpoint, model.layers and the family's knobs                                  */
/* ------------------------------------------------------------------------------------ */

static moe_cfg_checkpoint_fn cfg_checkpoint_reader;
static bool key_value(const cfg_key_t *k, const moe_config_t *cfg, char *buf, size_t n);

void moe_cfg_set_checkpoint_reader(moe_cfg_checkpoint_fn fn)
{
    cfg_checkpoint_reader = fn;
}

static moe_cfg_input_rows_fn cfg_input_reader;

void moe_cfg_set_input_reader(moe_cfg_input_rows_fn fn)
{
    cfg_input_reader = fn;
}

/* workload.tokens_per_step left out with an input file: the file's row count (moe_config/config.h
 * moe_cfg_set_input_reader); within the key's range, else the default stays and the load
 * says what the file has. */
static void input_tokens(cfg_parse_t *p)
{
    moe_config_t *c = &p->cfg;
    const cfg_key_t *k = key_by_path("workload.tokens_per_step");
    int64_t rows = 0;
    moe_error_t ignored;
    moe_error_clear(&ignored);
    if (cfg_input_reader == NULL || k == NULL || key_given(p, k->path) ||
        strcmp(c->input, "random") == 0 ||
        cfg_input_reader(c->input, &rows, &ignored) != MOE_OK) {
        return;
    }
    if (rows >= k->imin && rows <= k->imax) {
        c->tokens_per_step = rows;
    }
}

/* A checkpoint problem is bad input (exit 4), not a config error: MOE_ERR_WEIGHTS. */
static moe_status_t ckpt_fail(cfg_parse_t *p, moe_cfg_mark_t m, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static moe_status_t ckpt_fail(cfg_parse_t *p, moe_cfg_mark_t m, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    moe_status_t st = cfg_failv(p, MOE_ERR_WEIGHTS, m, fmt, ap);
    va_end(ap);
    return st;
}

/* One value of config.json: set it, or check the YAML's own value agrees. Both sides go
 * through the key's parser, so "7168" and 7168.0 compare as the same number. */
static moe_status_t fact_apply(cfg_parse_t *p, const moe_cfg_checkpoint_info_t *info,
                               const moe_cfg_fact_t *f, moe_config_t *scratch)
{
    char why[MOE_ERROR_MSG_MAX / 2], mine[64];
    const cfg_key_t *k = key_by_path(f->path);
    if (k == NULL) {
        return moe_error_set(p->err, MOE_ERR_INTERNAL, "checkpoint fact for unknown key %s",
                             f->path);
    }
    memcpy(scratch, &p->cfg, sizeof(*scratch));
    if (!key_set_text(k, f->value, strlen(f->value), scratch, (cfg_why_t){why, sizeof(why)})) {
        return moe_error_set(p->err, MOE_ERR_WEIGHTS, "%s: %s: %s (moed's %s)",
                             info->config_path, f->source, why, k->path);
    }
    if (!key_given(p, k->path)) {
        memcpy((char *)&p->cfg + k->offset, (const char *)scratch + k->offset, k->size);
        snprintf(p->ckpt_path, sizeof(p->ckpt_path), "%s", info->config_path);
        if (p->num_ckpt_facts < MOE_CFG_FACTS_MAX) {
            p->ckpt_facts[p->num_ckpt_facts++] = *f;
        }
        return MOE_OK;
    }
    if (memcmp((const char *)&p->cfg + k->offset, (const char *)scratch + k->offset, k->size) ==
        0) {
        return MOE_OK;
    }
    key_value(k, &p->cfg, mine, sizeof(mine));
    return ckpt_fail(p, val_mark_of(p, k->path), "%s: %s contradicts %s (%s %s); remove the key "
                     "or make it agree", k->path, mine, info->config_path, f->source, f->value);
}

/* model.layers against the checkpoint's MoE layers; 'all' takes every one of them. */
static moe_status_t ckpt_layers(cfg_parse_t *p, const moe_cfg_checkpoint_info_t *info)
{
    moe_config_t *c = &p->cfg;
    if (c->num_layer_ids == 0) {
        for (int l = 0; l < info->num_hidden_layers && l < MOE_MAX_LAYER_IDS; l++) {
            if (info->is_moe[l]) {
                c->layer_ids[c->num_layer_ids++] = l;
            }
        }
        if (c->num_layer_ids == 0) {
            return ckpt_fail(p, val_mark_of(p, "model.checkpoint"), "%s: no decoder layer is "
                             "MoE (%s)", info->config_path, info->moe_rule);
        }
        return MOE_OK;
    }
    for (int i = 0; i < c->num_layer_ids; i++) {
        int l = c->layer_ids[i];
        if (l >= info->num_hidden_layers) {
            return ckpt_fail(p, p->layer_mark[i], "model.layers: layer %d is out of range: %s "
                             "has num_hidden_layers %d (layers 0..%d)", l, info->config_path,
                             info->num_hidden_layers, info->num_hidden_layers - 1);
        }
        if (!info->is_moe[l]) {
            return ckpt_fail(p, p->layer_mark[i], "model.layers: layer %d is a dense layer, "
                             "not MoE (%s: %s)", l, info->config_path, info->moe_rule);
        }
    }
    return MOE_OK;
}

static moe_status_t ckpt_apply(cfg_parse_t *p)
{
    moe_config_t *c = &p->cfg;
    moe_cfg_mark_t m = val_mark_of(p, "model.checkpoint");
    if (cfg_checkpoint_reader == NULL) {
        return cfg_fail(p, m, "model.checkpoint: this program reads no checkpoints");
    }
    if (strcmp(c->weights, "random") != 0 || key_given(p, "model.first_layer")) {
        return cfg_fail(p, m, "model.checkpoint replaces model.weights and model.first_layer "
                        "(use model.layers to pick layers): remove those keys");
    }
    moe_cfg_checkpoint_info_t *info = calloc(1, sizeof(*info));
    moe_config_t *scratch = calloc(1, sizeof(*scratch));
    moe_status_t st = MOE_OK;
    if (info == NULL || scratch == NULL) {
        st = moe_error_set(p->err, MOE_ERR_NO_MEMORY, "%s: out of memory", p->src);
        goto out;
    }
    st = cfg_checkpoint_reader(c->checkpoint, info, p->err);
    for (int i = 0; st == MOE_OK && i < info->num_facts; i++) {
        st = fact_apply(p, info, &info->facts[i], scratch);
    }
    if (st == MOE_OK) {
        st = ckpt_layers(p, info);
    }
out:
    free(scratch);
    free(info);
    return st;
}

/* layer_ids and num_layers agree: a checkpoint's MoE layers, model.layers, or
 * first_layer + l for model.num_layers layers. */
static moe_status_t resolve_layers(cfg_parse_t *p)
{
    moe_config_t *c = &p->cfg;
    bool ckpt = strcmp(c->checkpoint, "none") != 0;
    moe_status_t st = ckpt ? ckpt_apply(p) : MOE_OK;
    if (st != MOE_OK) {
        return st;
    }
    if (c->num_layer_ids == 0) {
        if (c->first_layer + c->num_layers > MOE_MAX_LAYER_IDS) {
            return cfg_fail(p, val_mark_of(p, "model.first_layer"), "model.first_layer + "
                            "model.num_layers passes moed's limit of %d layers",
                            MOE_MAX_LAYER_IDS);
        }
        for (int64_t l = 0; l < c->num_layers; l++) {
            c->layer_ids[l] = (int32_t)(c->first_layer + l);
        }
        return MOE_OK;
    }
    if (!ckpt && key_given(p, "model.first_layer")) {
        return cfg_fail(p, val_mark_of(p, "model.layers"), "model.layers and model.first_layer "
                        "both pick layers: keep one");
    }
    if (key_given(p, "model.num_layers") && c->num_layers != c->num_layer_ids) {
        return (ckpt ? ckpt_fail : cfg_fail)(p, val_mark_of(p, "model.num_layers"),
                        "model.num_layers: %lld, but %d layer%s run (model.layers%s): remove "
                        "model.num_layers", (long long)c->num_layers, c->num_layer_ids,
                        c->num_layer_ids == 1 ? "" : "s", ckpt ? " or the checkpoint's MoE "
                        "layers" : "");
    }
    c->num_layers = c->num_layer_ids;
    return MOE_OK;
}

/* Knobs that only some families have, and their bounds against the model's sizes. */
static moe_status_t check_family(cfg_parse_t *p)
{
    moe_config_t *c = &p->cfg;
    moe_family_id_t fam = c->family;
    const char *name = cfg_family_names[fam];
    moe_cfg_mark_t fm = val_mark_of(p, "model.family");
    bool deepseek = fam == MOE_FAMILY_DEEPSEEK_V2 || fam == MOE_FAMILY_DEEPSEEK_V3;
    if (fam == MOE_FAMILY_GPT_OSS && !key_given(p, "model.activation")) {
        c->activation = MOE_ACT_SWIGLU_OAI;
    }
    if ((fam == MOE_FAMILY_GPT_OSS) != (c->activation == MOE_ACT_SWIGLU_OAI) ||
        (fam != MOE_FAMILY_MIXTRAL && c->activation == MOE_ACT_GELU)) {
        return cfg_fail(p, val_mark_of(p, "model.activation"), "model.activation: %s does not "
                        "go with model.family %s (gpt_oss: swiglu_oai; mixtral: swiglu or gelu; "
                        "others: swiglu)", cfg_activation_names[c->activation], name);
    }
    if (fam == MOE_FAMILY_DEEPSEEK_V3 && !key_given(p, "model.topk_method")) {
        c->topk_method = MOE_TOPK_NOAUX_TC;
    }
    if ((fam == MOE_FAMILY_DEEPSEEK_V3) != (c->topk_method == MOE_TOPK_NOAUX_TC) ||
        (!deepseek && c->topk_method != MOE_TOPK_GREEDY)) {
        return cfg_fail(p, val_mark_of(p, "model.topk_method"), "model.topk_method: %s does "
                        "not go with model.family %s (deepseek_v2: greedy or "
                        "group_limited_greedy; deepseek_v3: noaux_tc; others: greedy)",
                        cfg_topk_method_names[c->topk_method], name);
    }
    bool shared_ok = deepseek || (fam == MOE_FAMILY_QWEN2_MOE && c->n_shared_experts <= 1);
    if (c->n_shared_experts > 0 && !shared_ok) {
        return key_fail(p, "model.n_shared_experts", fm, "model.n_shared_experts: "
                        "%lld, but model.family %s has %s", (long long)c->n_shared_experts,
                        name, fam == MOE_FAMILY_QWEN2_MOE ? "at most one shared expert"
                                                          : "no shared experts");
    }
    bool grouped = c->topk_method != MOE_TOPK_GREEDY;
    if (grouped && (c->num_experts % c->n_group != 0 || c->topk_group > c->n_group ||
                    c->top_k > c->topk_group * (c->num_experts / c->n_group) ||
                    (fam == MOE_FAMILY_DEEPSEEK_V3 && c->num_experts / c->n_group < 2))) {
        return key_fail(p, "model.n_group", fm,
                        "model.n_group %lld / model.topk_group %lld: the %lld experts must split "
                        "into n_group equal groups (of at least 2 for deepseek_v3), topk_group "
                        "<= n_group, and the kept groups must hold top_k %lld experts",
                        (long long)c->n_group, (long long)c->topk_group,
                        (long long)c->num_experts, (long long)c->top_k);
    }
    if (fam != MOE_FAMILY_MIXTRAL && c->device == MOE_DEVICE_CUDA) {
        return cfg_fail(p, val_mark_of(p, "runtime.device"), "runtime.device: cuda runs "
                        "model.family mixtral only for now (the GPU back-end has no %s routing "
                        "or shared experts yet); use runtime.device: cpu", name);
    }
    return MOE_OK;
}

/* Online rebalancing moves host copies of the weights: the CPU back-end only; the extra
 * copies must fit apart on the expert ranks, and every layer's set in the placement table. */
static moe_status_t check_rebalance(cfg_parse_t *p, int world)
{
    const moe_config_t *c = &p->cfg;
    if (c->rebalance_every == 0) {
        return MOE_OK;
    }
    moe_cfg_mark_t m = val_mark_of(p, "runtime.rebalance_every");
    if (c->device == MOE_DEVICE_CUDA) {
        return cfg_fail(p, m, "runtime.rebalance_every: %lld, but online rebalancing runs on "
                        "runtime.device: cpu only (the GPU back-end holds its own copy of the "
                        "weights); use runtime.device: cpu or runtime.rebalance_every: 0",
                        (long long)c->rebalance_every);
    }
    int hosts = world - (c->routing == MOE_ROUTING_MASTER && world > 1 ? 1 : 0);
    int64_t E = c->num_experts, R = c->redundant_experts;
    if (world > 1 && R > E * (hosts - 1)) {
        return cfg_fail(p, val_mark_of(p, "runtime.redundant_experts"),
                        "runtime.redundant_experts: %lld extra copies do not fit apart on %d "
                        "expert rank%s (at most %lld: one copy of an expert per rank)",
                        (long long)R, hosts, hosts == 1 ? "" : "s", (long long)(E * (hosts - 1)));
    }
    if (E + c->num_layers * (E + R) > MOE_MAX_REPLICA_ENTRIES) {
        return cfg_fail(p, m, "runtime.rebalance_every: %lld layers x (%lld experts + %lld "
                        "copies) exceed the placement table (%d entries)",
                        (long long)c->num_layers, (long long)E, (long long)R,
                        MOE_MAX_REPLICA_ENTRIES);
    }
    return MOE_OK;
}

/* runtime.step_timeout_s: 0 turns the watchdog off; a bound under 1 s would fire on any
 * wait (a step, the start-up) and is shorter than the 1 s the watchdog then waits for the
 * ranks' answers to its pings (base/watchdog.c), so it is refused. */
#define CFG_STEP_TIMEOUT_MIN_S 1.0
static moe_status_t check_step_timeout(cfg_parse_t *p)
{
    double t = p->cfg.step_timeout_s;
    if (t > 0 && t < CFG_STEP_TIMEOUT_MIN_S) {
        return cfg_fail(p, val_mark_of(p, "runtime.step_timeout_s"),
                        "runtime.step_timeout_s: %g is below the watchdog's minimum of %g s "
                        "(0 turns the watchdog off)", t, CFG_STEP_TIMEOUT_MIN_S);
    }
    return MOE_OK;
}

/* A control token anyone could guess is no token: at least MOE_CFG_TOKEN_MIN bytes. A
 * report's config.yaml ("<redacted>") parses again: the live endpoint takes it as none. */
static moe_status_t check_control_token(cfg_parse_t *p)
{
    const char *t = p->cfg.prof_control_token;
    size_t n = strlen(t);
    if (strcmp(t, "none") == 0 || strcmp(t, "<redacted>") == 0 || n >= MOE_CFG_TOKEN_MIN) {
        return MOE_OK;
    }
    return cfg_fail(p, val_mark_of(p, "profiler.control_token"),
                    "profiler.control_token: %zu byte%s; a control token needs at least %d "
                    "(e.g. `openssl rand -hex 16`), or none", n, n == 1 ? "" : "s",
                    MOE_CFG_TOKEN_MIN);
}

static moe_status_t parse_checks(cfg_parse_t *p, int world)
{
    input_tokens(p);
    moe_status_t st = check_step_timeout(p);
    if (st == MOE_OK) {
        st = resolve_layers(p);
    }
    if (st == MOE_OK) {
        st = check_family(p);
    }
    if (st == MOE_OK) {
        st = check_top_k(p);
    }
    if (st == MOE_OK) {
        st = check_placement(p, world);
    }
    if (st == MOE_OK) {
        st = check_ranks(p, world);
    }
    if (st == MOE_OK) {
        st = check_rebalance(p, world);
    }
    if (st == MOE_OK) {
        st = check_control_token(p);
    }
    return st;
}

char *moe_cfg_redacted_text(const moe_config_t *cfg, const char *text, size_t len,
                            size_t *out_len)
{
    static const char red[] = "\"<redacted>\"";
    int64_t a = cfg->token_span[0], b = cfg->token_span[1];
    if (text == NULL || moe_hash64(text, len) != cfg->text_hash || a < 0 || b < a ||
        (size_t)b > len) {
        return NULL;
    }
    /* a block scalar's span takes its line break: the next key keeps its own line */
    bool nl = b > a && text[b - 1] == '\n';
    size_t n = b > a ? len - (size_t)(b - a) + (sizeof(red) - 1) + nl : len;
    char *out = malloc(n + 1);
    if (out == NULL) {
        return NULL;
    }
    if (b > a) {
        memcpy(out, text, (size_t)a);
        memcpy(out + a, red, sizeof(red) - 1);
        size_t at = (size_t)a + sizeof(red) - 1;
        if (nl) {
            out[at++] = '\n';
        }
        memcpy(out + at, text + b, len - (size_t)b);
    } else {
        memcpy(out, text, len);
    }
    out[n] = '\0';
    *out_len = n;
    return out;
}

moe_status_t moe_cfg_parse(const char *text, size_t len, const char *source_name,
                           int world_size, moe_config_t *cfg, moe_error_t *err)
{
    const char *src = source_name != NULL ? source_name : "<config>";
    const unsigned char *bytes = (const unsigned char *)(text != NULL ? text : "");
    moe_status_t st;
    if (cfg == NULL || (text == NULL && len > 0)) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "%s: moe_cfg_parse: no text or no config",
                             src);
    }
    if (world_size < 1 || world_size > MOE_MAX_RANKS) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG,
                             "%s: world size %d is out of range [1, %d]", src, world_size,
                             MOE_MAX_RANKS);
    }
    cfg_parse_t *p = calloc(1, sizeof(*p));
    if (p == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "%s: out of memory parsing the config", src);
    }
    p->src = src;
    p->err = err;
    p->text = (const char *)bytes;
    p->len = len;
    moe_cfg_defaults(&p->cfg);
    st = yaml_precheck(p, bytes, len);
    if (st == MOE_OK) {
        st = yaml_load(p, bytes, len);
    }
    if (st == MOE_OK) {
        st = parse_checks(p, world_size);
    }
    if (st == MOE_OK) {
        placement_resolve(p, world_size);
        snprintf(p->cfg.source_name, sizeof(p->cfg.source_name), "%s", src);
        p->cfg.text_hash = moe_hash64(bytes, len);
        p->cfg.world_size = world_size;
        memcpy(cfg, &p->cfg, sizeof(*cfg)); /* the caller's struct changes only on success */
    }
    free(p);
    return st;
}

/* ------------------------------------------------------------------------------------ */
/* Files, printing, queries                                                               */
/* ------------------------------------------------------------------------------------ */

static moe_status_t read_fail(moe_error_t *err, const char *path, int e)
{
    char why[128];
    if (strerror_r(e, why, sizeof(why)) != 0) { /* XSI strerror_r: thread-safe */
        snprintf(why, sizeof(why), "error %d", e);
    }
    return moe_error_set(err, MOE_ERR_IO, "cannot read config '%s': %s", path, why);
}

/* Read f to its end into a growing buffer, refusing more than CFG_FILE_MAX bytes. */
static moe_status_t read_all(FILE *f, const char *path, char **out, size_t *out_len,
                             moe_error_t *err)
{
    size_t cap = 4096, used = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        size_t got = fread(buf + used, 1, cap - used - 1, f); /* keep room for the NUL */
        used += got;
        if (used > CFG_FILE_MAX) {
            free(buf);
            return moe_error_set(err, MOE_ERR_IO, "cannot read config '%s': larger than %zu MiB; "
                                 "is it the right file?", path, CFG_FILE_MAX >> 20);
        }
        if (got == 0) {
            if (ferror(f)) {
                int e = errno;
                free(buf);
                return read_fail(err, path, e);
            }
            buf[used] = '\0';
            *out = buf;
            *out_len = used;
            return MOE_OK;
        }
        if (used + 1 == cap) {
            char *bigger = realloc(buf, cap * 2);
            if (bigger == NULL) {
                free(buf);
            }
            buf = bigger;
            cap *= 2;
        }
    }
    return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot read config '%s': out of memory", path);
}

moe_status_t moe_cfg_read_file(const char *path, char **text, size_t *len, moe_error_t *err)
{
    moe_status_t st;
    if (path == NULL || text == NULL || len == NULL) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "moe_cfg_read_file: NULL argument");
    }
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return read_fail(err, path, errno);
    }
    st = read_all(f, path, text, len, err);
    fclose(f);
    return st;
}

static const char *key_type_name(const cfg_key_t *k)
{
    static const char *const names[] = {"int",       "double", "bool",  "enum",
                                        "string",    "placement", "ranks", "layers",
                                        "placement"};
    _Static_assert(sizeof(names) / sizeof(names[0]) == CFG_PLACEMENT_LAYERS + 1,
                   "a name for every cfg_type_t");
    return names[k->type];
}

/* The RANGE column: bounds, enum names, or the forms of the special keys. */
static void key_range(char *buf, size_t n, const cfg_key_t *k)
{
    size_t pos = 0;
    buf[0] = '\0';
    switch (k->type) {
    case CFG_INT:
        buf_add(buf, n, &pos, "[%lld, %lld]", (long long)k->imin, (long long)k->imax);
        break;
    case CFG_DOUBLE: buf_add(buf, n, &pos, "[%g, %g]", k->dmin, k->dmax); break;
    case CFG_BOOL: buf_add(buf, n, &pos, "true | false"); break;
    case CFG_STRING: buf_add(buf, n, &pos, "< %d bytes", MOE_PATH_MAX); break;
    case CFG_PLACEMENT: buf_add(buf, n, &pos, "auto | {rank: [ids]}"); break;
    case CFG_RANKS: buf_add(buf, n, &pos, "all | [rank, ...]"); break;
    case CFG_LAYERS: buf_add(buf, n, &pos, "all | [layer, ...]"); break;
    case CFG_PLACEMENT_LAYERS: buf_add(buf, n, &pos, "none | {layer: {rank: [ids]}}"); break;
    case CFG_ENUM:
        for (size_t i = 0; k->names[i] != NULL; i++) {
            buf_add(buf, n, &pos, "%s%s", i == 0 ? "" : " | ", k->names[i]);
        }
        break;
    }
}

void moe_cfg_print_reference(FILE *out)
{
    char range[128];
    int wp = 3, wt = 4, wd = 7, wr = 5, wu = 4;
    if (out == NULL) {
        return;
    }
    for (size_t i = 0; i < CFG_NKEYS; i++) { /* column widths */
        const cfg_key_t *k = &cfg_keys[i];
        key_range(range, sizeof(range), k);
        wp = (int)strlen(k->path) > wp ? (int)strlen(k->path) : wp;
        wt = (int)strlen(key_type_name(k)) > wt ? (int)strlen(key_type_name(k)) : wt;
        wd = (int)strlen(k->def) > wd ? (int)strlen(k->def) : wd;
        wr = (int)strlen(range) > wr ? (int)strlen(range) : wr;
        wu = (int)strlen(k->unit) > wu ? (int)strlen(k->unit) : wu;
    }
    fprintf(out, "%-*s  %-*s  %-*s  %-*s  %-*s  %s\n", wp, "KEY", wt, "TYPE", wd, "DEFAULT", wr,
            "RANGE", wu, "UNIT", "DESCRIPTION");
    for (size_t i = 0; i < CFG_NKEYS; i++) {
        const cfg_key_t *k = &cfg_keys[i];
        key_range(range, sizeof(range), k);
        fprintf(out, "%-*s  %-*s  %-*s  %-*s  %-*s  %s\n", wp, k->path, wt, key_type_name(k), wd,
                k->def, wr, range, wu, k->unit[0] != '\0' ? k->unit : "-", k->doc);
    }
}

/* One table cell: '|' escaped, '*' and '<' made literal, so GitHub renders the text as is. */
static void md_cell(FILE *out, const char *s)
{
    for (; *s != '\0'; s++) {
        if (*s == '|' || *s == '*') {
            fprintf(out, "\\%c", *s);
        } else if (*s == '<') {
            fputs("&lt;", out);
        } else {
            fputc(*s, out);
        }
    }
}

void moe_cfg_print_reference_markdown(FILE *out)
{
    char range[128];
    if (out == NULL) {
        return;
    }
    fputs("| key | type | default | range | unit | meaning |\n|---|---|---|---|---|---|\n", out);
    for (size_t i = 0; i < CFG_NKEYS; i++) {
        const cfg_key_t *k = &cfg_keys[i];
        key_range(range, sizeof(range), k);
        fprintf(out, "| `%s` | %s | ", k->path, key_type_name(k));
        md_cell(out, k->def);
        fputs(" | ", out);
        md_cell(out, range);
        fputs(" | ", out);
        md_cell(out, k->unit);
        fputs(" | ", out);
        md_cell(out, k->doc);
        fputs(" |\n", out);
    }
}

/* "{1: [0, 1], 2: [2, 3]}" for placement set `set`: the ranks ascending, each with its
 * experts ascending (an expert with replicas appears under each of its ranks). */
static void value_set(const moe_config_t *cfg, int set, char *buf, size_t n, size_t *pos)
{
    const char *sep = "";
    buf_add(buf, n, pos, "{");
    for (int r = 0; r < cfg->world_size; r++) {
        bool first = true;
        for (int i = 0; i < cfg->num_replicas; i++) {
            const moe_cfg_replica_t *x = &cfg->replicas[i];
            if (x->set != set || x->rank != r) {
                continue;
            }
            if (first) {
                buf_add(buf, n, pos, "%s%d: [%d", sep, r, x->expert);
            } else {
                buf_add(buf, n, pos, ", %d", x->expert);
            }
            first = false;
        }
        if (!first) {
            buf_add(buf, n, pos, "]");
            sep = ", ";
        }
    }
    buf_add(buf, n, pos, "}");
}

/* placement.experts as resolved, so `auto` and the map it resolves to read the same. */
static void value_placement(const moe_config_t *cfg, char *buf, size_t n)
{
    size_t pos = 0;
    value_set(cfg, 0, buf, n, &pos);
}

/* placement.layers: "none" or "{0: {1: [0, 1], 2: [0, 2]}, 1: {...}}". */
static void value_placement_layers(const moe_config_t *cfg, char *buf, size_t n)
{
    size_t pos = 0;
    if (!cfg->placement_per_layer) {
        buf_add(buf, n, &pos, "none");
        return;
    }
    const char *sep = "";
    buf_add(buf, n, &pos, "{");
    for (int l = 0; l < cfg->num_layers && l < MOE_MAX_LAYER_IDS; l++) {
        if (cfg->layer_own[l]) {
            buf_add(buf, n, &pos, "%s%d: ", sep, l);
            value_set(cfg, l + 1, buf, n, &pos);
            sep = ", ";
        }
    }
    buf_add(buf, n, &pos, "}");
}

static void value_ranks(const moe_config_t *cfg, char *buf, size_t n)
{
    size_t pos = 0;
    bool first = true;
    buf_add(buf, n, &pos, "[");
    for (int r = 0; r < cfg->world_size; r++) {
        if (moe_cfg_rank_profiled(cfg, r)) {
            buf_add(buf, n, &pos, first ? "%d" : ", %d", r);
            first = false;
        }
    }
    buf_add(buf, n, &pos, "]");
}

/* "[3, 4, 5]": the decoder layer of each moed layer, as this run resolved them. */
static void value_layers(const moe_config_t *cfg, char *buf, size_t n)
{
    size_t pos = 0;
    buf_add(buf, n, &pos, "[");
    for (int64_t l = 0; l < cfg->num_layers && l < MOE_MAX_LAYER_IDS; l++) {
        buf_add(buf, n, &pos, l == 0 ? "%d" : ", %d", cfg->layer_ids[l]);
    }
    buf_add(buf, n, &pos, "]");
}

/* The value of key k in cfg as text; true when it is text a JSON writer quotes. */
static bool key_value(const cfg_key_t *k, const moe_config_t *cfg, char *buf, size_t n)
{
    const char *field = (const char *)cfg + k->offset;
    int64_t i64;
    double d;
    int e;
    bool b;
    switch (k->type) {
    case CFG_INT:
        memcpy(&i64, field, sizeof(i64));
        snprintf(buf, n, "%lld", (long long)i64);
        return false;
    case CFG_DOUBLE:
        memcpy(&d, field, sizeof(d));
        snprintf(buf, n, "%.15g", d); /* "0.1", not 0.10000000000000001 ... */
        if (strtod(buf, NULL) != d) {
            snprintf(buf, n, "%.17g", d); /* ... unless it is needed to read back equal */
        }
        return false;
    case CFG_BOOL:
        memcpy(&b, field, sizeof(b));
        snprintf(buf, n, "%s", b ? "true" : "false");
        return false;
    case CFG_ENUM:
        memcpy(&e, field, sizeof(e));
        snprintf(buf, n, "%s", e >= 0 && k->names[e] != NULL ? k->names[e] : "?");
        return true;
    case CFG_STRING: snprintf(buf, n, "%s", field); return true;
    case CFG_PLACEMENT: value_placement(cfg, buf, n); return true;
    case CFG_PLACEMENT_LAYERS: value_placement_layers(cfg, buf, n); return true;
    case CFG_RANKS: value_ranks(cfg, buf, n); return true;
    case CFG_LAYERS: value_layers(cfg, buf, n); return true;
    }
    return true;
}

void moe_cfg_each_value(const moe_config_t *cfg, moe_cfg_value_fn fn, void *ctx)
{
    char *buf = cfg != NULL && fn != NULL ? malloc(MOE_CFG_VALUE_MAX) : NULL;
    for (size_t i = 0; buf != NULL && i < CFG_NKEYS; i++) {
        bool quoted = key_value(&cfg_keys[i], cfg, buf, MOE_CFG_VALUE_MAX);
        if (strcmp(cfg_keys[i].path, "profiler.control_token") == 0 && strcmp(buf, "none") != 0) {
            snprintf(buf, MOE_CFG_VALUE_MAX, "(set)"); /* a secret: never into a report */
        }
        static const char cut[] = "... (truncated)"; /* beyond the limits: never silently */
        if (strlen(buf) >= MOE_CFG_VALUE_MAX - 1) {
            memcpy(buf + MOE_CFG_VALUE_MAX - sizeof(cut), cut, sizeof(cut));
        }
        fn(ctx, cfg_keys[i].path, buf, quoted);
    }
    free(buf);
}

/* The lines of one placement set: "rank 1: experts 0 1 2 3". */
static void print_set(const moe_config_t *cfg, int layer, const char *indent, FILE *out)
{
    int32_t *ids = malloc(sizeof(int32_t) * MOE_MAX_EXPERTS);
    for (int r = 0; ids != NULL && r < cfg->world_size; r++) {
        int count = layer < 0 ? moe_cfg_experts_of_rank(cfg, r, ids)
                              : moe_cfg_experts_of_rank_layer(cfg, layer, r, ids);
        fprintf(out, "%srank %d: ", indent, r);
        if (cfg->routing == MOE_ROUTING_SYMMETRIC) {
            fputs("routes its tokens, ", out);
        } else if (r == cfg->master_rank) {
            fputs("master (routes tokens), ", out);
        }
        fputs("experts", out);
        for (int i = 0; i < count; i++) {
            bool rep = moe_cfg_replicas_of(cfg, layer < 0 ? 0 : layer, ids[i], NULL) > 1;
            fprintf(out, rep ? " %d*" : " %d", ids[i]);
        }
        fputs(count == 0 ? " -\n" : "\n", out);
    }
    free(ids);
}

void moe_cfg_print_placement(const moe_config_t *cfg, FILE *out)
{
    if (cfg == NULL || out == NULL) {
        return;
    }
    print_set(cfg, -1, "", out);
    for (int l = 0; cfg->placement_per_layer && l < cfg->num_layers && l < MOE_MAX_LAYER_IDS;
         l++) {
        if (cfg->layer_own[l]) {
            fprintf(out, "layer %d (placement.layers):\n", l);
            print_set(cfg, l, "  ", out);
        }
    }
    if (cfg->placement_replicas) {
        fputs("(* an expert with replicas: its tokens are split between its ranks)\n", out);
    }
}

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
