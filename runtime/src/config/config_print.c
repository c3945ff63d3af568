/* Printing the config: --help-config's key reference and its markdown form (docs/config.md
 * is checked against it), each key's value as this run resolved it (moe_cfg_each_value:
 * config.json in the run folder, summary.json) and the placement lines (config_int.h lists
 * the part's files). */
#include "moe_config/config.h"

#include "config/config_int.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        cfg_buf_add(buf, n, &pos, "[%lld, %lld]", (long long)k->imin, (long long)k->imax);
        break;
    case CFG_DOUBLE: cfg_buf_add(buf, n, &pos, "[%g, %g]", k->dmin, k->dmax); break;
    case CFG_BOOL: cfg_buf_add(buf, n, &pos, "true | false"); break;
    case CFG_STRING: cfg_buf_add(buf, n, &pos, "< %d bytes", MOE_PATH_MAX); break;
    case CFG_PLACEMENT: cfg_buf_add(buf, n, &pos, "auto | {rank: [ids]}"); break;
    case CFG_RANKS: cfg_buf_add(buf, n, &pos, "all | [rank, ...]"); break;
    case CFG_LAYERS: cfg_buf_add(buf, n, &pos, "all | [layer, ...]"); break;
    case CFG_PLACEMENT_LAYERS: cfg_buf_add(buf, n, &pos, "none | {layer: {rank: [ids]}}"); break;
    case CFG_ENUM:
        for (size_t i = 0; k->names[i] != NULL; i++) {
            cfg_buf_add(buf, n, &pos, "%s%s", i == 0 ? "" : " | ", k->names[i]);
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
    for (size_t i = 0; i < cfg_nkeys; i++) { /* column widths */
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
    for (size_t i = 0; i < cfg_nkeys; i++) {
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
    for (size_t i = 0; i < cfg_nkeys; i++) {
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
    cfg_buf_add(buf, n, pos, "{");
    for (int r = 0; r < cfg->world_size; r++) {
        bool first = true;
        for (int i = 0; i < cfg->num_replicas; i++) {
            const moe_cfg_replica_t *x = &cfg->replicas[i];
            if (x->set != set || x->rank != r) {
                continue;
            }
            if (first) {
                cfg_buf_add(buf, n, pos, "%s%d: [%d", sep, r, x->expert);
            } else {
                cfg_buf_add(buf, n, pos, ", %d", x->expert);
            }
            first = false;
        }
        if (!first) {
            cfg_buf_add(buf, n, pos, "]");
            sep = ", ";
        }
    }
    cfg_buf_add(buf, n, pos, "}");
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
        cfg_buf_add(buf, n, &pos, "none");
        return;
    }
    const char *sep = "";
    cfg_buf_add(buf, n, &pos, "{");
    for (int l = 0; l < cfg->num_layers && l < MOE_MAX_LAYER_IDS; l++) {
        if (cfg->layer_own[l]) {
            cfg_buf_add(buf, n, &pos, "%s%d: ", sep, l);
            value_set(cfg, l + 1, buf, n, &pos);
            sep = ", ";
        }
    }
    cfg_buf_add(buf, n, &pos, "}");
}

static void value_ranks(const moe_config_t *cfg, char *buf, size_t n)
{
    size_t pos = 0;
    bool first = true;
    cfg_buf_add(buf, n, &pos, "[");
    for (int r = 0; r < cfg->world_size; r++) {
        if (moe_cfg_rank_profiled(cfg, r)) {
            cfg_buf_add(buf, n, &pos, first ? "%d" : ", %d", r);
            first = false;
        }
    }
    cfg_buf_add(buf, n, &pos, "]");
}

/* "[3, 4, 5]": the decoder layer of each moed layer, as this run resolved them. */
static void value_layers(const moe_config_t *cfg, char *buf, size_t n)
{
    size_t pos = 0;
    cfg_buf_add(buf, n, &pos, "[");
    for (int64_t l = 0; l < cfg->num_layers && l < MOE_MAX_LAYER_IDS; l++) {
        cfg_buf_add(buf, n, &pos, l == 0 ? "%d" : ", %d", cfg->layer_ids[l]);
    }
    cfg_buf_add(buf, n, &pos, "]");
}

/* The value of key k in cfg as text; true when it is text a JSON writer quotes. */
bool cfg_key_value(const cfg_key_t *k, const moe_config_t *cfg, char *buf, size_t n)
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
    for (size_t i = 0; buf != NULL && i < cfg_nkeys; i++) {
        bool quoted = cfg_key_value(&cfg_keys[i], cfg, buf, MOE_CFG_VALUE_MAX);
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
    if (cfg->placement_replicas && cfg->column_shares > 1) {
        fprintf(out, "(* placement.copies: columns: each expert's %lld ffn columns are cut into "
                "%d shares, one a rank in rank order; every token of the expert goes to all)\n",
                (long long)cfg->ffn_dim, (int)cfg->column_shares);
    } else if (cfg->placement_replicas && cfg->copies == MOE_COPIES_BALANCE) {
        fputs("(* placement.copies: balance: each step all of an expert's tokens go to one of "
              "its ranks, the one with the fewest experts to read)\n", out);
    } else if (cfg->placement_replicas) {
        fputs("(* an expert with replicas: its tokens are split between its ranks)\n", out);
    }
}

