/* The planner's configs as text: summary.json's resolved "config" (or a base config's
 * values in that form) back into YAML, which keys a new run must not inherit, and the
 * report's config parsed again for its own world, and a report folder's summary.json
 * read. Called by planner.c, plan_trace.c and plan_check.c; calls none of them. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/plan_int.h"
#include "compare/json_lookup.h"
#include "compare/rank_load.h"
#include "compare/report_dir.h"
#include "moe/utf8.h"
#include "moe/file.h"

/* A run whose online rebalancing (runtime.rebalance_every) moved experts is refused:
 * summary.json's experts[].rank and replicas[] give the configured placement, not where its
 * experts ran after a move, and nothing in the report says which placement ran which step's
 * tokens, so a plan's "before" or a check's per-rank tokens from it would be wrong. */
static moe_status_t plan_summary_unmoved(const char *dir, const json_t *doc, moe_error_t *err)
{
    int64_t times = 0, moved = moe_rank_moved(doc, &times);
    if (moved == 0) {
        return MOE_OK;
    }
    return moe_error_set(err, MOE_ERR_INVALID_ARG, "%s: online rebalancing moved %" PRId64
                         " expert%s in %" PRId64 " rebalance%s (summary.json rebalances[]), and "
                         "the report gives only the configured placement, not where experts ran "
                         "after a move: moed plan and --check need a run without "
                         "runtime.rebalance_every (moed plan --routing plans from a recorded "
                         "trace)", dir, moved,
                         moved == 1 ? "" : "s", times, times == 1 ? "" : "s");
}

moe_status_t plan_summary_load(const char *dir, json_t **doc, moe_error_t *err)
{
    char path[MOE_PATH_MAX + 32];
    moe_path_join(path, sizeof(path), dir, "summary.json");
    moe_status_t st = moe_report_dir_check(dir, err);
    if (st == MOE_OK) {
        st = moe_json_load_file(path, doc, err);
    }
    if (st == MOE_OK && strcmp(moe_json_str(moe_json_path(*doc, "schema"), ""), "moed.summary")) {
        st = moe_error_set(err, MOE_ERR_INVALID_ARG, "%s: not a moed report folder (its "
                           "summary.json is not a moed summary)", dir);
    }
    if (st == MOE_OK) {
        st = plan_summary_unmoved(dir, *doc, err);
    }
    return st == MOE_ERR_FORMAT || st == MOE_ERR_IO ? MOE_ERR_INVALID_ARG : st;
}

/* Whether libyaml takes code point c inside a comment as text: its printable set
 * (YAML 1.1's: tab, 0x20-0x7E, 0xA0-0xD7FF, 0xE000-0xFFFD but the BOM, 0x10000 on) less
 * the line breaks NEL, U+2028 and U+2029, which would end the comment. */
static bool yaml_comment_char(uint32_t c)
{
    return c == '\t' || (c >= 0x20 && c <= 0x7E) || (c >= 0xA0 && c <= 0xD7FF && c != 0x2028 &&
                                                     c != 0x2029) ||
           (c >= 0xE000 && c <= 0xFFFD && c != 0xFEFF) || c >= 0x10000;
}

void plan_comment_text(FILE *f, const char *s)
{
    const unsigned char *u = (const unsigned char *)s, *end = u + strlen(s);
    while (u < end) {
        uint32_t c = 0;
        size_t n = moe_utf8_seq(u, end, &c);
        if (n == 0 || !yaml_comment_char(c)) {
            fprintf(f, "\\x%02X", *u);
            u++;
            continue;
        }
        fwrite(u, 1, n, f);
        u += n;
    }
}

/* A value of summary.json's "config" as YAML, as the report wrote it. */
void plan_yaml_value(FILE *f, const json_t *v)
{
    if (json_is_integer(v)) {
        fprintf(f, "%lld", (long long)json_integer_value(v));
    } else if (json_is_real(v)) {
        fprintf(f, "%.17g", json_real_value(v));
    } else if (json_is_boolean(v)) {
        fputs(json_is_true(v) ? "true" : "false", f);
    } else {
        const char *s = moe_json_str(v, "");
        if (s[0] == '{' || s[0] == '[') {
            fputs(s, f);
            return;
        }
        fputc('"', f);
        for (; *s; s++) {
            fprintf(f, *s == '"' || *s == '\\' ? "\\%c" : "%c", *s);
        }
        fputc('"', f);
    }
}

/* Which keys of the resolved config pick the decoder layers: model.checkpoint's (model.layers
 * or every MoE layer of config.json), else model.layers where it names other layers than
 * model.first_layer.. does (a trace of layers [3, 7] replays only so), else first_layer.
 * The config refuses model.layers beside either of the others. */
plan_pick_t plan_pick_of(const json_t *cfg)
{
    plan_pick_t k = {.ck = strcmp(moe_json_str(json_object_get(cfg, "model.checkpoint"),
                                               "none"), "none") != 0};
    const json_t *v = json_object_get(cfg, "model.layers");
    json_t *list = json_is_string(v) ? json_loads(json_string_value(v), JSON_DECODE_ANY, NULL)
                                     : json_incref((json_t *)v);
    double first = moe_json_num(json_object_get(cfg, "model.first_layer"), 0);
    for (size_t i = 0; i < json_array_size(list); i++) {
        k.layers |= moe_json_num(json_array_get(list, i), -1) != first + (double)i;
    }
    json_decref(list);
    return k;
}

/* Keys the new run must not inherit (profiled ranks of the old world, a secret, the layer
 * keys the others replace) and the placement. */
bool plan_yaml_skip(const char *key, const json_t *v, plan_pick_t pick)
{
    return strcmp(key, "placement.experts") == 0 || strcmp(key, "placement.layers") == 0 ||
           strcmp(key, "profiler.profiled_ranks") == 0 ||
           (strcmp(key, "profiler.control_token") == 0 && strcmp(moe_json_str(v, ""), "none")) ||
           (strcmp(key, "model.layers") == 0 && !pick.ck && !pick.layers) ||
           (strcmp(key, "model.first_layer") == 0 && (pick.ck || pick.layers)) ||
           /* a checkpoint run: model.checkpoint replaces the weights (the config refuses both) */
           (pick.ck && strcmp(key, "model.weights") == 0);
}

/* The report's config parsed again for its own world, for its shape, routing and master
 * rank. Not its placement: summary.json's placement strings are for people (a long one
 * could be cut); where the experts ran comes from the experts[] and replicas[] rows. */
moe_status_t plan_old_config(plan_t *p, moe_error_t *err)
{
    const json_t *cfg = moe_json_path(p->doc, "config");
    int world = (int)moe_json_num(moe_json_path(p->doc, "run.world_size"), 0);
    if (!json_is_object(cfg) || world < 1) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "%s: the report has no resolved config "
                             "(summary.json \"config\"): record it again with this moed",
                             p->a.dir != NULL ? p->a.dir : p->a.routing);
    }
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL) {
        return MOE_ERR_NO_MEMORY;
    }
    char section[32] = "";
    const char *key;
    json_t *v;
    plan_pick_t ck = plan_pick_of(cfg);
    json_object_foreach((json_t *)cfg, key, v) {
        const char *dot = strchr(key, '.');
        bool keep = dot != NULL && (size_t)(dot - key) < sizeof(section) &&
                    strcmp(key, "profiler.control_token") != 0 && !plan_yaml_skip(key, v, ck);
        if (!keep) {
            continue;
        }
        if (strncmp(section, key, (size_t)(dot - key)) != 0 || section[dot - key] != '\0') {
            snprintf(section, sizeof(section), "%.*s", (int)(dot - key), key);
            fprintf(f, "%s:\n", section);
        }
        fprintf(f, "  %s: ", dot + 1);
        plan_yaml_value(f, v);
        fputc('\n', f);
    }
    fclose(f);
    moe_status_t st = moe_cfg_parse(text, len, "summary.json config", world, p->old, err);
    free(text);
    return st;
}
