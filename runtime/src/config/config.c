/* Part config (runtime/src/config/): the YAML config: one key table drives the loader, the
 * checks, --help-config and the did-you-mean. May include: base (and the public headers in
 * moe/). One file of each part's folder opens with such a comment; tests/lint/parts.sh
 * holds every part to its list. */
/* moed configuration: the key table.
 *
 * cfg_keys[] below is the only place a key is declared. moe_cfg_defaults() parses each
 * entry's default text, the loader (config_load.c) looks keys up in it, the error messages
 * take their bounds and enum names from it, and moe_cfg_print_reference() (config_print.c)
 * prints it. Adding a key is one line in the table plus its field in moe_config_t. This
 * file also holds the key look-ups, the text helpers of the messages and the did-you-mean,
 * the scalar parsers shared by the defaults and the loader, and the table's self-check.
 * config_int.h lists the part's other files: the loader, the cross checks, the placement
 * model and the printing.
 *
 * The model families' names are written once, in cfg_family_names below (model.family's
 * values); model/family.c's rows take them through moe_cfg_family_name(). */
#include "moe_config/config.h"

#include "config/config_int.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------ */
/* The key table                                                                          */
/* ------------------------------------------------------------------------------------ */


const char *const cfg_activation_names[] = {"swiglu", "gelu", "swiglu_oai", NULL};
static const char *const cfg_family_names[] = {"mixtral",     "qwen2_moe",   "qwen3_moe",
                                               "deepseek_v2", "deepseek_v3", "gpt_oss", NULL};
const char *const cfg_topk_method_names[] = {"greedy", "group_limited_greedy",
                                                    "noaux_tc", NULL};
static const char *const cfg_dtype_names[] = {"f32", "bf16", "f16", "auto", NULL};
static const char *const cfg_num_dtype_names[] = {"auto", "f32", "bf16", NULL};
static const char *const cfg_routing_names[] = {"master", "symmetric", NULL};
static const char *const cfg_transport_names[] = {"mpi", "ucx", "nccl", NULL};
static const char *const cfg_device_names[] = {"cpu", "cuda", NULL};
static const char *const cfg_bind_names[] = {"auto", "none", "core", NULL};
static const char *const cfg_dedup_names[] = {"auto", "true", "false", NULL};
static const char *const cfg_expert_hist_names[] = {"auto", "expert", "layer", NULL};
static const char *const cfg_copies_names[] = {"replicas", "columns", "balance", NULL};

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
_Static_assert(MOE_DEDUP_AUTO == 0 && MOE_DEDUP_ON == 1 && MOE_DEDUP_OFF == 2,
               "cfg_dedup_names order");
_Static_assert(MOE_COPIES_REPLICAS == 0 && MOE_COPIES_COLUMNS == 1 && MOE_COPIES_BALANCE == 2,
               "cfg_copies_names order");
_Static_assert(MOE_EXPERT_HIST_AUTO == 0 && MOE_EXPERT_HIST_EXPERT == 1 &&
               MOE_EXPERT_HIST_LAYER == 2, "cfg_expert_hist_names order");

const char *moe_cfg_activation_name(moe_activation_t a)
{
    size_t n = sizeof(cfg_activation_names) / sizeof(cfg_activation_names[0]) - 1;
    return (int)a >= 0 && (size_t)a < n ? cfg_activation_names[a] : "?";
}

const char *moe_cfg_family_name(moe_family_id_t id)
{
    return (int)id >= 0 && (size_t)id < sizeof(cfg_family_names) / sizeof(cfg_family_names[0]) - 1
               ? cfg_family_names[id]
               : NULL;
}

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
const cfg_key_t cfg_keys[] = {
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
             "how expert weights (and shared experts) are held in memory; auto = the "
             "checkpoint's type (FP8 and MXFP4 held as stored on the CPU, dequantised to bf16 "
             "on cuda), f32 for random weights; bf16 or f32 widen them; f16 on the CPU is held "
             "as f32"),
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
    KEY_ENUM("placement.copies", copies, cfg_copies_names, "replicas",
             "what an expert's copies on several ranks are: replicas (each holds the whole "
             "expert, its tokens are split between them), columns (each holds 1/n of its ffn "
             "columns, every token goes to all n, their outputs add) or balance (each holds "
             "the whole expert, each step all its tokens from a routing rank go to the copy "
             "whose rank has the fewest experts to read); with columns and balance, auto "
             "placement puts every expert on every expert rank"),

    KEY_ENUM("runtime.routing", routing, cfg_routing_names, "master",
             "master: one rank routes every token; symmetric: every rank routes its own"),
    KEY_ENUM("runtime.transport", transport, cfg_transport_names, "mpi",
             "how ranks exchange tokens"),
    KEY_BOOL("runtime.ucx_peer_errors", ucx_peer_errors, "true",
             "ucx: a lost rank is an error moed reports with the report kept (UCX's peer error "
             "handling); false: UCX's fastest transports, but a lost rank can end the job "
             "inside UCX"),
    KEY_ENUM("runtime.device", device, cfg_device_names, "cpu", "where experts run"),
    KEY_INT("runtime.threads", threads, "1", 1, 256, "threads",
            "BLAS (f32) and oneDNN (bf16, OpenMP) threads per rank"),
    KEY_INT("runtime.small_batch_rows", small_batch_rows, "-1", -1, 576, "rows",
            "expert calls of at most this many rows run on moed's small-batch kernels (each "
            "weight byte read once for all rows), larger ones on the GEMM libraries; -1 = the "
            "switch point measured for the weights' type (docs/performance.md), 0 = never"),
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
    KEY_ENUM("runtime.dedup", dedup, cfg_dedup_names, "auto",
             "true: a token goes once to each rank holding some of its experts, which sums "
             "their weighted outputs and sends one row back; false: one row per (token, "
             "expert) each way; auto = true on cpu, false on cuda (which lacks it)"),
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
    KEY_STR("workload.routing", routing_trace, "none",
            "'none' or a routing trace (moed-routing/1: a file, or a folder holding "
            "routing.safetensors) whose recorded choices replace the gate's, step after step"),

    KEY_BOOL("profiler.enabled", prof_enabled, "true", "record per-step statistics"),
    KEY_INT("profiler.warmup_steps", prof_warmup_steps, "5", 0, 1000000000, "steps",
            "steps run but not recorded"),
    KEY_INT("profiler.wait_steps", prof_wait_steps, "0", 0, 1000000000, "steps",
            "steps run but not recorded after each measurement window"),
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
            "bound on metrics.csv (30-40 B a row, a row per step, layer and expert); 0 = no "
            "bound; the report says at which step the file stopped"),
    KEY_BOOL("profiler.record_routing", prof_record_routing, "false",
             "write the recorded steps' routing (every layer's top-k ids and weights per "
             "token) to routing.safetensors in the report folder"),
    KEY_INT("profiler.routing_max_mb", prof_routing_max_mb, "1024", 1, 2047, "MiB",
            "refuse (at start) a profiler.record_routing recording larger than this"),
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
_Static_assert(CFG_NKEYS <= CFG_KEYS_MAX, "raise CFG_KEYS_MAX (config_int.h)");
const size_t cfg_nkeys = CFG_NKEYS;

/* Names longer than this are never close to a key: no suggestion, bounded work. */
#define CFG_NAME_MAX 64

size_t cfg_key_section_len(const cfg_key_t *k)
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
    size_t la = cfg_key_section_len(a);
    return la == cfg_key_section_len(b) && memcmp(a->path, b->path, la) == 0;
}

const cfg_key_t *cfg_key_by_path(const char *path)
{
    for (size_t i = 0; i < CFG_NKEYS; i++) {
        if (strcmp(cfg_keys[i].path, path) == 0) {
            return &cfg_keys[i];
        }
    }
    return NULL;
}

/* Index of the first key of the section `name`, or -1. */
int cfg_section_find(const char *name, size_t len)
{
    for (size_t i = 0; i < CFG_NKEYS; i++) {
        if (cfg_key_section_len(&cfg_keys[i]) == len && memcmp(cfg_keys[i].path, name, len) == 0) {
            return (int)i;
        }
    }
    return -1;
}

/* Index of the key `leaf` in the section starting at key `sec`, or -1. */
int cfg_key_find(int sec, const char *leaf, size_t len)
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
void cfg_buf_add(char *buf, size_t n, size_t *pos, const char *fmt, ...)
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
void cfg_text_clean(char *buf, size_t n, const char *s, size_t len)
{
    size_t pos = 0, cut = len > CFG_QUOTE_MAX ? CFG_QUOTE_MAX : len;
    while (cut < len && cut > 0 && ((unsigned char)s[cut] & 0xC0) == 0x80) {
        cut--; /* do not split a multi-byte character */
    }
    buf[0] = '\0';
    for (size_t i = 0; i < cut; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f) {
            cfg_buf_add(buf, n, &pos, "\\x%02x", c);
        } else {
            cfg_buf_add(buf, n, &pos, "%c", c);
        }
    }
    if (cut < len) {
        cfg_buf_add(buf, n, &pos, "...");
    }
}

/* "'two'", or "nothing" for an empty value. */
void cfg_text_quote(char *buf, size_t n, const char *s, size_t len)
{
    char clean[4 * CFG_QUOTE_MAX + 8];
    if (len == 0) {
        snprintf(buf, n, "nothing");
        return;
    }
    cfg_text_clean(clean, sizeof(clean), s, len);
    snprintf(buf, n, "'%s'", clean);
}

bool cfg_mark_before(moe_cfg_mark_t a, moe_cfg_mark_t b)
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
const cfg_key_t *cfg_suggest_key(int sec, const char *leaf, size_t len)
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
int cfg_suggest_section(const char *name, size_t len)
{
    int best = -1;
    size_t best_d = SIZE_MAX;
    for (size_t i = 0; i < CFG_NKEYS; i++) {
        if (i > 0 && key_same_section(&cfg_keys[i], &cfg_keys[i - 1])) {
            continue;
        }
        size_t d = levenshtein(name, len, cfg_keys[i].path, cfg_key_section_len(&cfg_keys[i]));
        if (d < best_d) {
            best_d = d;
            best = (int)i;
        }
    }
    return best >= 0 && distance_close(best_d, len) ? best : -1;
}

/* "model, placement, runtime, workload, profiler" */
void cfg_sections_list(char *buf, size_t n)
{
    size_t pos = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < CFG_NKEYS; i++) {
        if (i == 0 || !key_same_section(&cfg_keys[i], &cfg_keys[i - 1])) {
            cfg_buf_add(buf, n, &pos, "%s%.*s", i == 0 ? "" : ", ",
                        (int)cfg_key_section_len(&cfg_keys[i]), cfg_keys[i].path);
        }
    }
}

/* "hidden_dim, ffn_dim, ..." for the section starting at key `sec`. */
void cfg_section_keys_list(char *buf, size_t n, int sec)
{
    size_t pos = 0;
    buf[0] = '\0';
    for (size_t i = (size_t)sec; i < CFG_NKEYS && key_same_section(&cfg_keys[i], &cfg_keys[sec]);
         i++) {
        cfg_buf_add(buf, n, &pos, "%s%s", i == (size_t)sec ? "" : ", ", key_leaf(&cfg_keys[i]));
    }
}

/* What a key accepts, for "expected ...". */
void cfg_key_expected(char *buf, size_t n, const cfg_key_t *k)
{
    size_t pos = 0;
    buf[0] = '\0';
    switch (k->type) {
    case CFG_INT: cfg_buf_add(buf, n, &pos, "an integer"); break;
    case CFG_DOUBLE: cfg_buf_add(buf, n, &pos, "a number"); break;
    case CFG_BOOL: cfg_buf_add(buf, n, &pos, "true or false"); break;
    case CFG_STRING: cfg_buf_add(buf, n, &pos, "a non-empty string"); break;
    case CFG_PLACEMENT:
        cfg_buf_add(buf, n, &pos,
                    "'auto' or a mapping rank -> [expert ids] like {1: [0, 1], 2: [2, 3]}");
        break;
    case CFG_RANKS:
        cfg_buf_add(buf, n, &pos, "'all' or a sequence of ranks like [0, 2]");
        break;
    case CFG_LAYERS:
        cfg_buf_add(buf, n, &pos, "'all' or a sequence of layers like [3, 4, 5]");
        break;
    case CFG_PLACEMENT_LAYERS:
        cfg_buf_add(buf, n, &pos, "'none' or a mapping layer -> {rank: [expert ids]} like "
                    "{0: {1: [0, 1], 2: [2]}}");
        break;
    case CFG_ENUM:
        for (size_t i = 0; k->names[i] != NULL; i++) {
            const char *sep = i == 0 ? "" : (k->names[i + 1] == NULL ? " or " : ", ");
            cfg_buf_add(buf, n, &pos, "%s%s", sep, k->names[i]);
        }
        break;
    }
}

/* ------------------------------------------------------------------------------------ */
/* Scalar values: shared by the defaults and the loader                                  */
/* ------------------------------------------------------------------------------------ */

/* Decimal with an optional sign and nothing else: 0 ok, -1 not an integer, 1 overflow.
 * strtoll alone would take " 12", "12abc" (with an end check) and "0x1f" (base 0). */
int cfg_parse_int64(const char *s, int64_t *out)
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

/* A finite decimal number, all of the text consumed: 0; -1 otherwise (nan, inf, hex, junk,
 * spaces); 1 when a number too small for a double (1e-400) would read as 0 or a subnormal
 * (a capacity factor or a watchdog bound of 0 means none). */
static int parse_double(const char *s, double *out)
{
    if (s[0] == '\0' || s[0] == ' ' || s[0] == '\t' || strpbrk(s, "xX") != NULL) {
        return -1;
    }
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (*end != '\0' || !isfinite(v)) {
        return -1;
    }
    if (errno == ERANGE || (v != 0.0 && !isnormal(v))) {
        return 1;
    }
    *out = v;
    return 0;
}

/* Each parse_* below: s is NUL-terminated with no NUL inside; on failure it writes the
 * message tail ("expected ..., found ..." or "... is out of range") to why. */

static bool why_expected(cfg_why_t why, const cfg_key_t *k, const char *s)
{
    char exp[256], found[4 * CFG_QUOTE_MAX + 16];
    cfg_key_expected(exp, sizeof(exp), k);
    cfg_text_quote(found, sizeof(found), s, strlen(s));
    snprintf(why.buf, why.n, "expected %s, found %s", exp, found);
    return false;
}

static bool why_range(cfg_why_t why, const char *s, const char *lo, const char *hi)
{
    char shown[4 * CFG_QUOTE_MAX + 8];
    cfg_text_clean(shown, sizeof(shown), s, strlen(s));
    snprintf(why.buf, why.n, "%s is out of range [%s, %s]", shown, lo, hi);
    return false;
}

static bool set_int(const cfg_key_t *k, const char *s, void *field, cfg_why_t why)
{
    int64_t v = 0;
    int rc = cfg_parse_int64(s, &v);
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
    int bad = parse_double(s, &v);
    if (bad < 0) {
        return why_expected(why, k, s);
    }
    if (bad > 0 || v < k->dmin || v > k->dmax) {
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
    int n = 0;
    for (; k->names[n] != NULL; n++) {
        if (strcmp(s, k->names[n]) == 0) {
            memcpy(field, &n, sizeof(n)); /* table check: the enum field is int-sized */
            return true;
        }
    }
    (void)why_expected(why, k, s);
    const char *near = moe_cfg_suggest(s, k->names, (size_t)n);
    size_t used = strlen(why.buf);
    if (near != NULL && used < why.n) {
        snprintf(why.buf + used, why.n - used, " (did you mean '%s'?)", near);
    }
    return false;
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
bool cfg_key_set_text(const cfg_key_t *k, const char *s, size_t len, moe_config_t *cfg,
                      cfg_why_t why)
{
    void *field = (char *)cfg + k->offset;
    if (strlen(s) != len) {
        /* A NUL inside a quoted scalar ("1\0"): show the bytes, never half the value. */
        char exp[256], found[4 * CFG_QUOTE_MAX + 16];
        cfg_key_expected(exp, sizeof(exp), k);
        cfg_text_quote(found, sizeof(found), s, len);
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
        (void)cfg_key_set_text(&cfg_keys[i], cfg_keys[i].def, strlen(cfg_keys[i].def), cfg,
                               (cfg_why_t){why, sizeof(why)});
    }
    for (int e = 0; e < MOE_MAX_EXPERTS; e++) {
        cfg->expert_owner[e] = -1; /* unresolved until moe_cfg_parse knows the world */
    }
}

void moe_cfg_mark_where(const moe_config_t *cfg, moe_cfg_mark_t m, char *out, size_t len)
{
    if (m.line > 0) {
        snprintf(out, len, "%s:%d:%d: ", cfg->source_name, m.line, m.col);
    } else if (len > 0) {
        out[0] = '\0';
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
    if (!cfg_key_set_text(k, k->def, strlen(k->def), scratch, (cfg_why_t){why, n})) {
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

