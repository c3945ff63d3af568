/* Private to the config part and its tests: what the part's files share.
 *
 * config.c        the key table (cfg_keys[], the only declaration of every key), key
 *                 look-ups, message text helpers, the scalar parsers, the defaults and the
 *                 table's self-check
 * config_load.c   reading the file, the YAML pre-check and walk, marks, the parse errors
 * config_checks.c the cross checks once every key is known, model.checkpoint's facts, and
 *                 moe_cfg_parse (load, checks, placement) on top
 * placement.c     the placement model: resolving `auto`, the per-layer sets and the
 *                 queries the layer makes on every forward
 * config_print.c  --help-config, the markdown reference, key values, the placement lines
 *
 * Calls go one way (lint.calls: no loops between the files of a folder):
 * config_checks -> config_load, placement, config_print -> config.c.
 *
 * The unit test also runs the key table's self-check: a mistake in the table (a default
 * that does not parse, an offset into a field of the wrong size, two keys with one path)
 * would surface only as a wrong default at run time. */
#ifndef MOE_CONFIG_INT_H
#define MOE_CONFIG_INT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "moe_config/config.h"
#include "moe/status.h"

/* Check every table entry: "section.leaf" path, unique, sections contiguous, field size
 * matching the type, bounds ordered, default parses and lies in its bounds. Returns
 * MOE_OK, or MOE_ERR_INTERNAL with the first bad entry named in err. */
moe_status_t moe_cfg_table_check(moe_error_t *err);

/* Number of keys in the table (for tests that walk it). */
size_t moe_cfg_table_size(void);

/* ---- the key table (config.c) ------------------------------------------------------ */

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

extern const cfg_key_t cfg_keys[];
extern const size_t cfg_nkeys; /* entries of cfg_keys[] */
/* Bound on the table's size for the per-key marks of a parse (config.c asserts it). */
#define CFG_KEYS_MAX 128
/* model.activation's and model.topk_method's names, indexed by enum value (the checks
 * name the value that does not go with the family). */
extern const char *const cfg_activation_names[];
extern const char *const cfg_topk_method_names[];

/* Longest user text quoted back in a message, so a message stays one readable line. */
#define CFG_QUOTE_MAX 48

size_t cfg_key_section_len(const cfg_key_t *k);
const cfg_key_t *cfg_key_by_path(const char *path);
/* Index of the first key of the section `name`, or -1. */
int cfg_section_find(const char *name, size_t len);
/* Index of the key `leaf` in the section starting at key `sec`, or -1. */
int cfg_key_find(int sec, const char *leaf, size_t len);
/* Append printf-style text to buf (size n) at *pos, never overflowing; a full buffer
 * just stops growing. */
void cfg_buf_add(char *buf, size_t n, size_t *pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* s (len bytes) made printable and bounded by CFG_QUOTE_MAX. */
void cfg_text_clean(char *buf, size_t n, const char *s, size_t len);
/* "'two'", or "nothing" for an empty value. */
void cfg_text_quote(char *buf, size_t n, const char *s, size_t len);
/* a is before b in the file. */
bool cfg_mark_before(moe_cfg_mark_t a, moe_cfg_mark_t b);
/* Did-you-mean: the key of section `sec`, or the section, closest to the name; NULL / -1. */
const cfg_key_t *cfg_suggest_key(int sec, const char *leaf, size_t len);
int cfg_suggest_section(const char *name, size_t len);
/* "model, placement, runtime, workload, profiler" */
void cfg_sections_list(char *buf, size_t n);
/* "hidden_dim, ffn_dim, ..." for the section starting at key `sec`. */
void cfg_section_keys_list(char *buf, size_t n, int sec);
/* What a key accepts, for "expected ...". */
void cfg_key_expected(char *buf, size_t n, const cfg_key_t *k);
/* An integer, all of the text consumed; -1 otherwise. */
int cfg_parse_int64(const char *s, int64_t *out);

/* Where a failed parse_* writes its message tail ("expected ..., found ..." or "... is out
 * of range"). */
typedef struct cfg_why {
    char *buf;
    size_t n;
} cfg_why_t;

/* Set key k in cfg from scalar text s (len bytes, NUL-terminated). */
bool cfg_key_set_text(const cfg_key_t *k, const char *s, size_t len, moe_config_t *cfg,
                      cfg_why_t why);

/* ---- one parse (config_load.c) ---------------------------------------------------- */

/* One (set, expert, rank) as written, with where. */
typedef struct cfg_entry {
    moe_cfg_replica_t r;
    moe_cfg_mark_t mark;
} cfg_entry_t;

/* Everything one parse needs; heap-allocated (the marks tables are ~100 KiB). The config
 * is built here and copied out only on success, so the caller's struct is untouched by
 * a failed parse. */
typedef struct cfg_parse {
    const char *src;
    moe_error_t *err;
    const char *text; /* for turning a reader error's byte offset into line:col */
    size_t len;
    struct yaml_document_s *doc; /* yaml_document_t */
    moe_config_t cfg;
    moe_cfg_mark_t key_mark[CFG_KEYS_MAX];  /* the key's name; line 0: not in the file */
    moe_cfg_mark_t val_mark[CFG_KEYS_MAX];  /* its value */
    moe_cfg_mark_t section_mark[CFG_KEYS_MAX]; /* indexed by the section's first key */
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
    char ckpt_path[MOE_PATH_MAX + 16];
    int num_ckpt_facts;
    moe_cfg_fact_t ckpt_facts[MOE_CFG_FACTS_MAX];
} cfg_parse_t;

/* Fail with `code`: "src:line:col: message", or "src: message" without a mark. */
moe_status_t cfg_failv(cfg_parse_t *p, moe_status_t code, moe_cfg_mark_t m, const char *fmt,
                       va_list ap) __attribute__((format(printf, 4, 0)));
/* A config error (MOE_ERR_CONFIG, exit 3) at mark m. */
moe_status_t cfg_fail(cfg_parse_t *p, moe_cfg_mark_t m, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Where the value of key `path` was written (line 0: not in the file), and whether it was. */
moe_cfg_mark_t cfg_val_mark_of(cfg_parse_t *p, const char *path);
bool cfg_key_given(cfg_parse_t *p, const char *path);
/* Bound libyaml's input (depth, anchors), then load the single document and walk it. */
moe_status_t cfg_yaml_precheck(cfg_parse_t *p, const unsigned char *text, size_t len);
moe_status_t cfg_yaml_load(cfg_parse_t *p, const unsigned char *text, size_t len);

/* ---- placement (placement.c) ------------------------------------------------------- */

/* Set, expert, rank, then file order (qsort on cfg_entry_t). */
int cfg_entry_cmp(const void *pa, const void *pb);
/* Keep the written entries that apply, add the generated ones, sort, publish. */
void cfg_placement_resolve(cfg_parse_t *p, int world);

/* ---- printing (config_print.c) ----------------------------------------------------- */

/* The value of key k in cfg as text; true when it is text a JSON writer quotes. */
bool cfg_key_value(const cfg_key_t *k, const moe_config_t *cfg, char *buf, size_t n);

#endif /* MOE_CONFIG_INT_H */
