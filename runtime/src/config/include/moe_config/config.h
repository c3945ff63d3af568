/* moed configuration: the struct every rank fills from the same YAML bytes.
 *
 * Every key is declared once in the table in config.c (YAML path, type, default, bounds,
 * unit, doc, offset into moe_config_t); the loader, the validator and `moed --help-config`
 * all come from that table. Only rank 0 reads the file; the text is broadcast and every
 * rank calls moe_cfg_parse() on the same bytes, so all ranks agree or all fail. */
#ifndef MOE_CONFIG_H
#define MOE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "moe/hash.h"
#include "moe/limits.h"
#include "moe/status.h"

/* model.layers entries, and decoder layers of a checkpoint, at most. */
#define MOE_MAX_LAYER_IDS 1024

/* Placement entries (expert, rank) over every placement set, at most: placement.experts is
 * set 0, placement.layers' entry for moed layer l is set l + 1. */
#define MOE_MAX_REPLICA_ENTRIES 32768

/* One copy of an expert on one rank in one placement set. */
typedef struct moe_cfg_replica {
    uint16_t set;    /* 0: placement.experts; l + 1: placement.layers' layer l */
    uint16_t expert;
    int32_t rank;
} moe_cfg_replica_t;

/* swiglu_oai: gpt-oss's clamped SwiGLU with biases (expert/expert.h). */
typedef enum { MOE_ACT_SWIGLU = 0, MOE_ACT_GELU = 1, MOE_ACT_SWIGLU_OAI = 2 } moe_activation_t;
/* An activation's name: model.activation's value ("swiglu", "gelu", "swiglu_oai"); "?"
 * for a value that is none (the names are written once, in the config's key table). */
const char *moe_cfg_activation_name(moe_activation_t a);
/* The model families moed routes exactly (model/family.h holds one row per family). */
typedef enum {
    MOE_FAMILY_MIXTRAL = 0,
    MOE_FAMILY_QWEN2_MOE = 1,
    MOE_FAMILY_QWEN3_MOE = 2,
    MOE_FAMILY_DEEPSEEK_V2 = 3,
    MOE_FAMILY_DEEPSEEK_V3 = 4,
    MOE_FAMILY_GPT_OSS = 5,
} moe_family_id_t;
/* A family's name: model.family's value and config.json's model_type ("mixtral", ...);
 * NULL for an id that is no family. The names are written once, in the config's key table
 * (config.c); model/family.c's rows take them from here. */
const char *moe_cfg_family_name(moe_family_id_t id);
/* DeepSeek expert selection: plain top-k, top-k inside the topk_group best groups (group
 * score: best expert, V2), or V3's noaux_tc (group score: sum of its best two). */
typedef enum {
    MOE_TOPK_GREEDY = 0,
    MOE_TOPK_GROUP_LIMITED = 1,
    MOE_TOPK_NOAUX_TC = 2,
} moe_topk_method_t;
typedef enum { MOE_ROUTING_MASTER = 0, MOE_ROUTING_SYMMETRIC = 1 } moe_routing_t;
typedef enum { MOE_TRANSPORT_MPI = 0, MOE_TRANSPORT_UCX = 1, MOE_TRANSPORT_NCCL = 2 } moe_transport_kind_t;
typedef enum { MOE_DEVICE_CPU = 0, MOE_DEVICE_CUDA = 1 } moe_device_kind_t;
typedef enum { MOE_BIND_AUTO = 0, MOE_BIND_NONE = 1, MOE_BIND_CORE = 2 } moe_bind_t;
/* runtime.dedup: one row per (token, destination rank) on the wire; AUTO = on for cpu, off
 * for cuda (its back-end sends a row per (token, expert)): moe_cfg_dedup resolves it. */
typedef enum { MOE_DEDUP_AUTO = 0, MOE_DEDUP_ON = 1, MOE_DEDUP_OFF = 2 } moe_dedup_t;
/* placement.copies: what an expert's copies on several ranks are. Replicas: each holds the
 * whole expert and takes a share of its tokens (contiguous shares by token index). Columns:
 * copy i of n holds the ffn columns [i * F / n, (i + 1) * F / n) of the expert (W1/W3's
 * rows, W2's inputs), every token of the expert goes to all n, and their partial outputs
 * add up in the merge. Balance: each holds the whole expert and every step all of the
 * expert's tokens (of one routing rank: each picks for its own) go to one copy, the one
 * whose rank has the fewest experts to read in the step so far (layer/plan.h). */
typedef enum {
    MOE_COPIES_REPLICAS = 0,
    MOE_COPIES_COLUMNS = 1,
    MOE_COPIES_BALANCE = 2
} moe_copies_t;
/* profiler.expert_histograms: moed_expert_seconds per (layer, expert) or per layer. */
typedef enum {
    MOE_EXPERT_HIST_AUTO = 0,
    MOE_EXPERT_HIST_EXPERT = 1,
    MOE_EXPERT_HIST_LAYER = 2
} moe_expert_hist_t;
/* model.dtype: how expert weights are held; AUTO = the checkpoint file's type (FP8 and
 * MXFP4 as stored on the CPU, BF16 on cuda), F32 for random weights. FP8 (e4m3 with block
 * scales) and MXFP4 (e2m1 with e8m0 scales per 32) are no model.dtype values: only what
 * auto resolves a checkpoint's experts to (model/weights.h). */
typedef enum {
    MOE_DTYPE_F32 = 0,
    MOE_DTYPE_BF16 = 1,
    MOE_DTYPE_F16 = 2,
    MOE_DTYPE_AUTO = 3,
    MOE_DTYPE_FP8 = 4,
    MOE_DTYPE_MXFP4 = 5
} moe_dtype_t;
/* runtime.compute_dtype and runtime.wire_dtype (app/engine.c resolves AUTO). */
typedef enum {
    MOE_NUM_AUTO = 0,
    MOE_NUM_F32 = 1,
    MOE_NUM_BF16 = 2
} moe_num_dtype_t;

/* Where a value came from in the YAML text (1-based, as editors count). line 0: not set
 * in the file (a default). */
typedef struct moe_cfg_mark {
    int line;
    int col;
} moe_cfg_mark_t;

typedef struct moe_config {
    /* model */
    int64_t hidden_dim;
    int64_t ffn_dim;
    int64_t num_experts;
    int64_t top_k;
    int64_t num_layers;
    moe_activation_t activation;
    bool normalize_topk;
    double capacity_factor;         /* 0 = no limit */
    char weights[MOE_PATH_MAX];     /* "random" or a .safetensors path */
    int64_t first_layer;            /* model.first_layer: index of moed's layer 0 in the file */
    moe_dtype_t dtype;              /* model.dtype: how expert weights are held (AUTO: file) */
    uint64_t seed;
    moe_family_id_t family;         /* model.family: routing, shared experts, tensor names */
    char checkpoint[MOE_PATH_MAX];  /* model.checkpoint: a Hugging Face directory, "" = none */
    int32_t num_layer_ids;          /* model.layers as written (0: not given) */
    /* Decoder layer index of each moed layer 0..num_layers-1 (checkpoint runs: model.layers
     * or every MoE layer of config.json; otherwise first_layer + l). */
    int32_t layer_ids[MOE_MAX_LAYER_IDS];
    moe_topk_method_t topk_method;  /* model.topk_method (deepseek_v2; v3 is noaux_tc) */
    int64_t n_group;                /* model.n_group: expert groups (deepseek) */
    int64_t topk_group;             /* model.topk_group: groups kept per token */
    double routed_scaling_factor;   /* model.routed_scaling_factor: routed weights times this */
    int64_t n_shared_experts;       /* model.n_shared_experts (deepseek; qwen2_moe: 1) */
    int64_t shared_ffn_dim;         /* model.shared_ffn_dim: 0 = ffn_dim * n_shared_experts */
    double swiglu_limit;            /* model.swiglu_limit (gpt_oss) */

    /* placement */
    int64_t master_rank;
    bool placement_auto;
    /* Resolved for the world size given to moe_cfg_parse(): owner rank of each expert
     * (its lowest rank in placement.experts when it has replicas). */
    int32_t expert_owner[MOE_MAX_EXPERTS];
    bool placement_per_layer;       /* placement.layers given and applied (world > 1) */
    bool placement_replicas;        /* some expert is on more than one rank in some set */
    moe_copies_t copies;            /* placement.copies */
    int32_t column_shares;          /* columns: the copies of every expert (checked equal);
                                     * 1 otherwise: see moe_cfg_expert_ffn */
    uint8_t layer_own[MOE_MAX_LAYER_IDS]; /* 1: moed layer l uses placement set l + 1 */
    /* Every (set, expert, rank), sorted by set, expert, rank; each set names every expert
     * at least once and no (expert, rank) twice. Read it through moe_cfg_layer_entries. */
    int32_t num_replicas;
    moe_cfg_replica_t replicas[MOE_MAX_REPLICA_ENTRIES];

    /* runtime */
    moe_routing_t routing;
    moe_transport_kind_t transport;
    bool ucx_peer_errors;           /* runtime.ucx_peer_errors: UCX reports a lost peer */
    moe_device_kind_t device;
    int64_t threads;                /* BLAS threads per rank */
    int64_t small_batch_rows;       /* runtime.small_batch_rows: -1 = the measured default */
    moe_num_dtype_t compute_dtype;  /* runtime.compute_dtype: the experts' GEMM inputs */
    moe_num_dtype_t wire_dtype;     /* runtime.wire_dtype: rows exchanged between ranks */
    moe_bind_t bind;                /* runtime.bind: pin ranks to cores (app/bind.h) */
    int64_t chunks;                 /* tokens of a step split for overlap */
    moe_dedup_t dedup;              /* runtime.dedup: read it through moe_cfg_dedup */
    double step_timeout_s;          /* watchdog; 0 = off */
    int64_t rebalance_every;        /* online rebalancing every N steps; 0 = off */
    int64_t redundant_experts;      /* extra expert copies per layer when rebalancing */

    /* workload */
    int64_t tokens_per_step;
    int64_t steps;
    char input[MOE_PATH_MAX];       /* "random" or a .safetensors path holding "input" */
    double routing_skew;
    char routing_trace[MOE_PATH_MAX]; /* workload.routing: "none" or a trace to replay */

    /* profiler */
    bool prof_enabled;
    int64_t prof_warmup_steps;
    int64_t prof_wait_steps;
    int64_t prof_measurement_steps;
    int64_t prof_repeat;            /* 0 = until the run ends */
    int64_t prof_sampling_rate;
    bool prof_all_ranks;            /* profiled_ranks: all */
    int32_t prof_num_ranks;         /* else a list of this many */
    int32_t prof_ranks[MOE_MAX_RANKS];
    int64_t prof_memory_sample_ms;
    bool prof_trace;
    int64_t prof_trace_max_events;
    int64_t prof_metrics_max_mb;    /* 0 = no bound */
    bool prof_record_routing;       /* write routing.safetensors */
    int64_t prof_routing_max_mb;    /* refuse a recording larger than this */
    char prof_output_dir[MOE_PATH_MAX];
    char prof_listen[MOE_PATH_MAX];       /* "HOST:PORT" or "off" */
    char prof_control_token[MOE_PATH_MAX]; /* "none": none (MOED_CONTROL_TOKEN may set one) */
#define MOE_CFG_TOKEN_MIN 16               /* bytes a control token has at least */
    moe_expert_hist_t prof_expert_hist;

    /* Provenance, filled by moe_cfg_parse(). */
    char source_name[MOE_PATH_MAX]; /* file name used in messages */
    uint64_t text_hash;             /* FNV-1a 64 of the exact text parsed */
    /* Bytes [0] to [1] of the text: profiler.control_token's value as written (equal: the
     * text sets none; -1: where is not known), for moe_cfg_redacted_text. */
    int64_t token_span[2];
    /* Where model.weights', workload.input's and workload.routing's values are in the text
     * (line 0: not written there), for the errors about the files they name
     * (app/preflight.c, app/replay.c: moe_cfg_mark_where). */
    moe_cfg_mark_t weights_mark;
    moe_cfg_mark_t input_mark;
    moe_cfg_mark_t routing_mark;
    int world_size;                 /* the world the placement was resolved for */
} moe_config_t;

/* Fill cfg with every default from the table (placement unresolved). */
void moe_cfg_defaults(moe_config_t *cfg);

/* "cfg.yaml:12:12: " for a value at mark m of cfg's text, the prefix the config's own errors
 * carry; "" where m is not known (line 0). For errors found later about what the value
 * names (a file that cannot be read, a trace that does not fit the model). */
void moe_cfg_mark_where(const moe_config_t *cfg, moe_cfg_mark_t m, char *out, size_t len);

/* Parse and validate YAML text (not NUL-terminated necessarily) named `source_name` in
 * messages, and resolve the placement for `world_size` ranks. On error returns a negative
 * status, leaves *cfg unspecified, and fills err with one message that starts with
 * "source_name:line:col: " where the YAML has a position, says the value found, what was
 * expected, and (for unknown keys) "did you mean ...?".
 *
 * With world_size == 1 an explicit placement is not applied: the single rank hosts every
 * expert (moed started without mpirun). */
moe_status_t moe_cfg_parse(const char *text, size_t len, const char *source_name,
                           int world_size, moe_config_t *cfg, moe_error_t *err);

/* The config text with profiler.control_token's value, as written, replaced by
 * "<redacted>" (a copy, malloc'd and NUL-terminated; *out_len its length), or the text as it
 * is when it sets no token. NULL when the text is not the one cfg was parsed from (its
 * hash), the value's place is not known, or no memory: nothing of it should be copied. */
char *moe_cfg_redacted_text(const moe_config_t *cfg, const char *text, size_t len,
                            size_t *out_len);

/* Read a whole file into a malloc'd NUL-terminated buffer (caller frees). */
moe_status_t moe_cfg_read_file(const char *path, char **text, size_t *len, moe_error_t *err);

/* The name among names[0..n) closest to `word` by edit distance when close enough to be a
 * typo of it (the config loader's "did you mean" rule), else NULL. For command-line flags. */
const char *moe_cfg_suggest(const char *word, const char *const *names, size_t n);

/* Print the key table (path, type, default, bounds, unit, doc) for --help-config. */
void moe_cfg_print_reference(FILE *out);

/* The same table as a Markdown table (docs/config.md holds its output; the test
 * docs.config_table fails when they differ). */
void moe_cfg_print_reference_markdown(FILE *out);

/* Each key of the table, in table order, with its value as this run resolved it: how a
 * value is written in YAML ("4", "0.5", "true", "master", a path), the placement as the
 * owner of every expert ("{1: [0, 1], 2: [2, 3]}", whether `auto` or written out), the
 * profiled ranks as a list ("[0, 1, 2]", whether `all` or written out). `quoted` is true
 * for text a JSON writer must quote (strings, enums, placement, ranks), false for numbers
 * and booleans. The buffer (MOE_CFG_VALUE_MAX) holds the longest placement the limits
 * allow (MOE_MAX_REPLICA_ENTRIES entries of at most 7 characters, a "rank: [" and "]" per
 * (layer, rank) group, a "layer: {" per layer), so no value is cut; were one ever longer,
 * it would end in "... (truncated)" rather than be cut silently. */
#define MOE_CFG_VALUE_MAX ((size_t)1 << 20)
typedef void (*moe_cfg_value_fn)(void *ctx, const char *path, const char *value, bool quoted);
void moe_cfg_each_value(const moe_config_t *cfg, moe_cfg_value_fn fn, void *ctx);

/* What a checkpoint directory's config.json says (model/checkpoint.c reads it): values
 * as YAML text for the key table's own parsers, each with where it came from, and which
 * decoder layers are MoE. moe_cfg_parse applies them after the YAML: a key the YAML also
 * gives must agree, else the parse fails (MOE_ERR_WEIGHTS, exit 4) citing both. */
#define MOE_CFG_FACTS_MAX 24
typedef struct moe_cfg_fact {
    char path[40];    /* a key of the table, "model.hidden_dim" */
    char value[40];   /* YAML text, "7168" */
    char source[96];  /* "config.json key 'hidden_size'" */
} moe_cfg_fact_t;
typedef struct moe_cfg_checkpoint_info {
    char config_path[MOE_PATH_MAX + 16]; /* DIR/config.json, for messages and reading */
    int num_facts;
    moe_cfg_fact_t facts[MOE_CFG_FACTS_MAX];
    int num_hidden_layers;
    bool is_moe[MOE_MAX_LAYER_IDS];
    char moe_rule[160];             /* "layers >= first_k_dense_replace 3 ...", for messages */
} moe_cfg_checkpoint_info_t;
typedef moe_status_t (*moe_cfg_checkpoint_fn)(const char *dir, moe_cfg_checkpoint_info_t *out,
                                              moe_error_t *err);
/* The reader moe_cfg_parse calls for model.checkpoint (the config part cannot include the
 * model part: the app registers model/checkpoint.c's reader). Without one, model.checkpoint
 * is rejected. */
void moe_cfg_set_checkpoint_reader(moe_cfg_checkpoint_fn fn);
/* The rows of workload.input's tensor 'input' (its first dimension), read from the file's
 * header: with such a reader registered (model/weights.c's moe_input_rows), a config that
 * names an input file and leaves workload.tokens_per_step out takes that count. A file that
 * cannot be read leaves the default: the checks before the run and the input's load say
 * why. */
typedef moe_status_t (*moe_cfg_input_rows_fn)(const char *path, int64_t *rows,
                                              moe_error_t *err);
void moe_cfg_set_input_reader(moe_cfg_input_rows_fn fn);

/* The command line's --steps (< 0: none): moe_cfg_parse puts it in workload.steps before
 * its checks, so every check of the steps (a recording's size and end) sees the number the
 * run will take; their messages then name --steps. */
void moe_cfg_set_steps_override(int64_t steps);

/* Print the resolved placement, one line per rank: "rank 1: experts 0 1 2 3". */
void moe_cfg_print_placement(const moe_config_t *cfg, FILE *out);

/* Number of experts owned by `rank` and, if ids != NULL, their ids ascending
 * (placement.experts: the set every layer uses unless placement.layers overrides it). */
int moe_cfg_experts_of_rank(const moe_config_t *cfg, int rank, int32_t *ids);

/* The same for moed layer `layer`: its own placement when placement.layers gives one. */
int moe_cfg_experts_of_rank_layer(const moe_config_t *cfg, int layer, int rank, int32_t *ids);

/* The expert id of `rank`'s local expert `le` (its le-th, ids ascending) in `layer`; -1
 * when it has fewer. */
int moe_cfg_local_expert(const moe_config_t *cfg, int layer, int rank, int le);

/* The most experts `rank` hosts in any one layer (buffers are sized for it). */
int moe_cfg_max_local(const moe_config_t *cfg, int rank);

/* Tokens routed by `rank` of world_size: all on the master in master routing (every token
 * on rank 0 alone), an even split (lower ranks take the remainder) in symmetric routing;
 * *first: the global index of its first. */
void moe_cfg_tokens_of_rank(const moe_config_t *cfg, int world_size, int rank, int64_t *first,
                            int64_t *count);

/* Steps the profiler's schedule records over workload.steps (warm-up, windows, sampling,
 * repeat: moe_prof_schedule), or -1 when neither the run nor its windows end. What
 * profiler.record_routing keeps, and what profiler.routing_max_mb is checked against. */
int64_t moe_cfg_recorded_steps(const moe_config_t *cfg);

/* The placement entries of moed layer `layer`, sorted by expert then rank (an expert's
 * replicas are adjacent, ranks ascending); *n gets their number. */
const moe_cfg_replica_t *moe_cfg_layer_entries(const moe_config_t *cfg, int layer, int *n);

/* Ranks that host `expert` in `layer`, ascending, into ranks (may be NULL); their number. */
int moe_cfg_replicas_of(const moe_config_t *cfg, int layer, int expert, int32_t *ranks);

/* The ranks that host experts when the placement is computed rather than written (auto
 * placement, online rebalancing): every rank but the master in master routing, every rank
 * in symmetric routing; ascending into ranks (may be NULL); their number. */
int moe_cfg_expert_ranks(const moe_config_t *cfg, int world, int32_t *ranks);

/* Online rebalancing's slots rule (moed plan's default): an expert rank holds at most
 * ceil((E + runtime.redundant_experts) / expert ranks) experts per layer. */
int moe_cfg_rebalance_slots(const moe_config_t *cfg, int world);

/* qsort order of placement entries: set, then expert, then rank (the order
 * moe_config_t.replicas keeps). */
int moe_cfg_replica_cmp(const void *a, const void *b);

/* Replace every placement.layers set by entries[n] (sets >= 1, any order; each set must
 * name every expert, no (expert, rank) twice); placement.experts stays. The layer and the
 * weights read the new sets from the next step on. MOE_ERR_INVALID_ARG when the table is
 * full. */
moe_status_t moe_cfg_set_layer_sets(moe_config_t *cfg, const moe_cfg_replica_t *entries, int n,
                                    moe_error_t *err);

/* True when rank r is profiled (profiled_ranks: all, or r is in the list). */
bool moe_cfg_rank_profiled(const moe_config_t *cfg, int rank);

/* runtime.dedup as it runs: true (one row per (token, rank), the expert rank sums a token's
 * local experts) when set so, or when auto on runtime.device: cpu. */
static inline bool moe_cfg_dedup(const moe_config_t *cfg)
{
    return cfg->dedup == MOE_DEDUP_ON ||
           (cfg->dedup == MOE_DEDUP_AUTO && cfg->device == MOE_DEVICE_CPU);
}

/* profiler.expert_histograms as it runs: true for moed_expert_seconds per (layer, expert),
 * when set so or when auto and experts x layers is at most 1024; false: per layer. */
static inline bool moe_cfg_expert_hist_per_expert(const moe_config_t *cfg)
{
    return cfg->prof_expert_hist == MOE_EXPERT_HIST_EXPERT ||
           (cfg->prof_expert_hist == MOE_EXPERT_HIST_AUTO &&
            cfg->num_layers * cfg->num_experts <= 1024);
}

/* The inner width one copy of an expert holds and computes: model.ffn_dim, or with
 * placement.copies: columns its share, ffn_dim / copies (the checks make it exact). */
static inline int64_t moe_cfg_expert_ffn(const moe_config_t *cfg)
{
    return cfg->column_shares > 1 ? cfg->ffn_dim / cfg->column_shares : cfg->ffn_dim;
}

/* FLOPs of an FFN of `ffn` columns over `rows` rows, the GEMMs only (2 M N K each): gate, up
 * and down for swiglu and swiglu_oai, up and down for gelu. The runtime's counts and the
 * profile's GFLOP/s both take it. */
static inline double moe_cfg_ffn_flops(moe_activation_t act, int64_t hidden, int64_t ffn,
                                       int64_t rows)
{
    return 2.0 * (double)rows * (double)hidden * (double)ffn * (act == MOE_ACT_GELU ? 2.0 : 3.0);
}

/* With placement.copies: columns, the first ffn column `rank`'s copy of `expert` holds in
 * `layer` (its place among the expert's ranks, ascending, times the share); 0 otherwise. */
int64_t moe_cfg_column_first(const moe_config_t *cfg, int layer, int expert, int rank);

/* The numbers of column shares (2 and up) that cut ffn columns into whole multiples of
 * `block`, "2, 3, 4, ..." into buf (left as it is when there are none), for messages. */
void moe_cfg_share_counts(int64_t ffn, int64_t block, char *buf, size_t n);

#endif /* MOE_CONFIG_H */
