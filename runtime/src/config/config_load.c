/* The config loader: reading the file, the YAML pre-check, the walk over libyaml's
 * document, where each value was written (marks) and the parse errors (config_int.h lists
 * the part's files).
 *
 * The loader uses libyaml's document API: the whole (small) file becomes a node graph
 * whose nodes carry their line and column, and the walk over it has a fixed depth
 * (sections -> keys -> placement ranks -> expert ids), so no input can make it recurse.
 * Aliases only point at existing nodes, so they cannot blow the walk up either. libyaml
 * itself is superlinear in nesting depth and anchor count, so an event pass bounds both
 * before the load (cfg_yaml_precheck).
 *
 * Where a value was written is kept in a private parse state (cfg_parse_t), not in the
 * public struct: the cross checks that run after every key is known (top_k against
 * num_experts, the placement against the world size) still cite the offending node. */
#include "moe_config/config.h"

#include "config/config_int.h"
#include "moe/file.h"
#include "moe/stop.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

/* Config files are a few hundred bytes; anything this large is the wrong file. */
#define CFG_FILE_MAX ((size_t)16 << 20)
/* Bounds on what libyaml is given to load (see cfg_yaml_precheck); a config needs depth 4. */
#define CFG_YAML_DEPTH_MAX 32
#define CFG_YAML_ANCHORS_MAX 256

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
        cfg_text_quote(buf, n, node_text(node), node->data.scalar.length);
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

/* ------------------------------------------------------------------------------------ */
/* The loader                                                                             */
/* ------------------------------------------------------------------------------------ */


/* Fail with `code`: "src:line:col: message", or "src: message" without a mark. */
moe_status_t cfg_failv(cfg_parse_t *p, moe_status_t code, moe_cfg_mark_t m,
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
moe_status_t cfg_fail(cfg_parse_t *p, moe_cfg_mark_t m, const char *fmt, ...)
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

moe_cfg_mark_t cfg_val_mark_of(cfg_parse_t *p, const char *path)
{
    const cfg_key_t *k = cfg_key_by_path(path);
    moe_cfg_mark_t none = {0, 0};
    return k != NULL ? p->val_mark[key_index(k)] : none;
}

bool cfg_key_given(cfg_parse_t *p, const char *path)
{
    return cfg_val_mark_of(p, path).line > 0;
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
        rc = cfg_parse_int64(node_text(node), &v); /* 1: too large for 64 bits */
    }
    if (rc < 0) {
        node_describe(found, sizeof(found), node);
        return cfg_fail(p, m, "%s: expected %s (an integer >= 0), found %s", k->path, what, found);
    }
    if (rc > 0 || v >= limit) {
        cfg_text_clean(found, sizeof(found), node_text(node), node->data.scalar.length);
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
    return MOE_OK; /* [] profiles no rank: legitimate, warned at start (preflight.c) */
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
        cfg_key_expected(exp, sizeof(exp), k);
        node_describe(found, sizeof(found), val);
        return cfg_fail(p, node_mark(val), "%s: expected %s, found %s", k->path, exp, found);
    }
    if (node_is_null(val) && node_text(val)[0] != '\0') { /* `~`, `null`: no value, not a
                                                           * path or a name spelt so */
        cfg_key_expected(exp, sizeof(exp), k);
        return cfg_fail(p, node_mark(val), "%s: expected %s, found a YAML null ('%s')",
                        k->path, exp, node_text(val));
    }
    if (!cfg_key_set_text(k, node_text(val), val->data.scalar.length, &p->cfg,
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
    const cfg_key_t *hint = cfg_suggest_key(sec, leaf, len);
    cfg_text_clean(name, sizeof(name), leaf, len);
    if (hint != NULL) {
        return cfg_fail(p, node_mark(key), "unknown key '%.*s.%s' (did you mean '%s'?)",
                        (int)cfg_key_section_len(s), s->path, name, hint->path);
    }
    cfg_section_keys_list(keys, sizeof(keys), sec);
    return cfg_fail(p, node_mark(key), "unknown key '%.*s.%s'; the keys of section '%.*s' are %s",
                    (int)cfg_key_section_len(s), s->path, name, (int)cfg_key_section_len(s),
                    s->path, keys);
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
    int section_len = (int)cfg_key_section_len(&cfg_keys[sec]);
    if (key->type != YAML_SCALAR_NODE) {
        node_describe(found, sizeof(found), key);
        return cfg_fail(p, node_mark(key), "section '%.*s': expected a key name, found %s",
                        section_len, cfg_keys[sec].path, found);
    }
    int i = cfg_key_find(sec, node_text(key), key->data.scalar.length);
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
    int hint = cfg_suggest_section(s, len);
    const cfg_key_t *khint = hint < 0 ? cfg_suggest_key(-1, s, len) : NULL;
    cfg_text_clean(name, sizeof(name), s, len);
    if (hint >= 0) {
        return cfg_fail(p, node_mark(key), "unknown section '%s' (did you mean '%.*s'?)", name,
                        (int)cfg_key_section_len(&cfg_keys[hint]), cfg_keys[hint].path);
    }
    if (khint != NULL) { /* a key written at the top level, outside its section */
        return cfg_fail(p, node_mark(key), "unknown section '%s' (did you mean '%s'?)", name,
                        khint->path);
    }
    cfg_sections_list(sections, sizeof(sections));
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
    int sec = cfg_section_find(node_text(key), key->data.scalar.length);
    if (sec < 0) {
        return unknown_section(p, key);
    }
    int section_len = (int)cfg_key_section_len(&cfg_keys[sec]);
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
        cfg_sections_list(sections, sizeof(sections));
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

moe_status_t cfg_yaml_precheck(cfg_parse_t *p, const unsigned char *text, size_t len)
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

/* Load the (single, bounded: see cfg_yaml_precheck) document and walk it. */
moe_status_t cfg_yaml_load(cfg_parse_t *p, const unsigned char *text, size_t len)
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
/* Files                                                                                  */
/* ------------------------------------------------------------------------------------ */

/* A path in a message, its last 400 bytes at most ("..." before them): the reason after
 * it must fit the message. */
#define SHOWN_PATH_MAX 400
static const char *shown_path(const char *path, const char **dots)
{
    size_t n = strlen(path);
    *dots = n > SHOWN_PATH_MAX ? "..." : "";
    const char *p = n > SHOWN_PATH_MAX ? path + n - SHOWN_PATH_MAX : path;
    while (p > path && ((unsigned char)*p & 0xC0) == 0x80) {
        p++; /* start on a character, not inside a multi-byte one */
    }
    return p;
}

static moe_status_t read_fail(moe_error_t *err, const char *path, int e)
{
    char why[128];
    const char *dots;
    const char *shown = shown_path(path, &dots);
    struct stat sb;
    if (e == ENXIO && stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) { /* a socket opens so */
        return moe_error_set(err, MOE_ERR_IO, "cannot read config '%s%s': it is %s, not a "
                             "file or a pipe", dots, shown, moe_file_kind(sb.st_mode));
    }
    if (strerror_r(e, why, sizeof(why)) != 0) { /* XSI strerror_r: thread-safe */
        snprintf(why, sizeof(why), "error %d", e);
    }
    return moe_error_set(err, MOE_ERR_IO, "cannot read config '%s%s': %s", dots, shown, why);
}

/* Before each read of a pipe or a terminal (`<(...)`, /dev/stdin, a FIFO): wait until it
 * has data or its writer is gone, in naps a signal cuts short (poll() is never restarted),
 * so a FIFO nobody writes to waits only until SIGINT or SIGTERM, saying once what it waits
 * for. Returns 0 when readable, or an errno (EINTR: a stop was requested). */
static int wait_readable(int fd, const char *path, int64_t *waited_ms)
{
    for (;;) {
        if (moe_stop_requested()) {
            return EINTR;
        }
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int rc = poll(&pfd, 1, 250);
        if (rc > 0) {
            return 0; /* POLLIN, or POLLHUP / POLLERR: the read says which */
        }
        if (rc < 0 && errno != EINTR) {
            return errno;
        }
        if (rc == 0 && (*waited_ms += 250) == 1000) {
            fprintf(stderr, "moed: waiting for the config from '%s' (not a file: a pipe or a "
                            "terminal), nothing written to it yet; SIGINT or SIGTERM stops\n",
                    path);
        }
    }
}

/* Read fd to its end into a growing buffer, refusing more than CFG_FILE_MAX bytes; a pipe
 * (stream) is waited on between reads (wait_readable). */
static moe_status_t read_all(int fd, bool stream, const char *path, char **out,
                             size_t *out_len, moe_error_t *err)
{
    size_t cap = 4096, used = 0;
    int64_t waited_ms = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        int w = stream ? wait_readable(fd, path, &waited_ms) : 0;
        ssize_t got = w == 0 ? read(fd, buf + used, cap - used - 1) : -1; /* room for NUL */
        if (got < 0 && w == 0 && (errno == EINTR || errno == EAGAIN)) {
            continue;
        }
        if (got < 0) {
            int e = w != 0 ? w : errno;
            free(buf);
            return e == EINTR ? moe_error_set(err, MOE_ERR_INTERRUPTED, "stopped while waiting "
                                              "for the config from '%s'", path)
                              : read_fail(err, path, e);
        }
        if (got == 0) { /* the end (a pipe: its writer closed it) */
            buf[used] = '\0';
            *out = buf;
            *out_len = used;
            return MOE_OK;
        }
        used += (size_t)got;
        if (used > CFG_FILE_MAX) {
            free(buf);
            return moe_error_set(err, MOE_ERR_IO, "cannot read config '%s': larger than %zu MiB; "
                                 "is it the right file?", path, CFG_FILE_MAX >> 20);
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
    if (path == NULL || text == NULL || len == NULL) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "moe_cfg_read_file: NULL argument");
    }
    /* O_NONBLOCK: open() of a FIFO with no writer would wait, and a signal restarts it */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        int e = errno;
        if (fd >= 0) {
            close(fd);
        }
        return read_fail(err, path, e);
    }
    bool stream = S_ISFIFO(sb.st_mode) || S_ISCHR(sb.st_mode);
    if (!S_ISREG(sb.st_mode) && !stream) {
        close(fd);
        return moe_error_set(err, MOE_ERR_IO, "cannot read config '%s': it is %s, not a file "
                             "or a pipe", path, moe_file_kind(sb.st_mode));
    }
    moe_status_t st = read_all(fd, stream, path, text, len, err);
    close(fd);
    return st;
}

