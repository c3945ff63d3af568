/* The planner's insides, shared by its files: planner.c (the command, a report's loads, the
 * config written), plan_trace.c (`--routing`: a trace's loads and the exact prediction)
 * and plan_check.c (`--check`: a replay's report against the prediction). */
#ifndef MOE_PLAN_INT_H
#define MOE_PLAN_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "moe_config/config.h"
#include "moe_model/routing_trace.h"

/* moed's exit codes: 1 runtime failure (no memory), 2 bad arguments or input (a folder
 * that is not a readable report, a trace that does not load), 5 the output could not be
 * written (docs/faults.md) */
enum { PLAN_OK = 0, PLAN_RUNTIME = 1, PLAN_USAGE = 2, PLAN_WRITE = 5, PLAN_HELP = -1 };

typedef struct plan_args {
    const char *dir;      /* REPORT_DIR (report mode) */
    const char *routing;  /* --routing PATH: a trace file or a folder holding one */
    const char *config;   /* --config BASE.yaml: the model's config (with --routing) */
    const char *check;    /* --check RUN_DIR */
    const char *hostfile, *out;
    int ranks, redundant, slots;
    bool out_given; /* -o: else REPORT_DIR/planned.yaml (or the trace's folder's) */
    bool force;     /* --force: replace an existing moed config of the same model */
} plan_args_t;

/* One layer's tokens per expert rank under one placement, as the runtime computes them:
 * the busiest expert rank's, the mean over the ranks that hold an expert of the layer. */
typedef struct plan_pred {
    int64_t max;    /* tokens (rows: a token at one of its experts) of the busiest rank */
    int64_t total;  /* tokens computed in the layer, every rank's */
    int hosts;      /* ranks holding an expert of the layer */
} plan_pred_t;

typedef struct plan {
    plan_args_t a;
    json_t *doc;          /* summary.json, or {"config": ..., "run": {"world_size": W}} */
    moe_config_t *old;    /* the base config, resolved for its own world */
    int E, L, n;          /* experts, layers, expert ranks */
    int32_t *ranks;       /* [n] the expert ranks */
    int32_t *node;        /* [n] node of each */
    double *loads;        /* [L * E] */
    uint8_t *host;        /* [L * n * E] the new placement */
    double *before, *after; /* [L] max/mean */
    double before_all, after_all; /* sum of the layers' max over the sum of their means */
    char *yaml;           /* the config written */
    /* --routing */
    moe_routing_trace_t tr;
    char base[4096 + 256]; /* where the base config came from, for people */
    bool base_report;     /* the base is a moed report's: its placement from experts[] rows */
    int base_world;       /* the world the base's placement is for */
    int *trace_layer;     /* [L] the trace's layer index of each moed layer */
    int64_t step_tokens;  /* the base's workload.tokens_per_step */
    int64_t steps;        /* steps the trace's rows make (the last filled by cycling) */
    int64_t capacity;     /* each expert's per step (0: none), as the runtime computes it */
    plan_pred_t *pb, *pa; /* [L] before and after */
} plan_t;

/* plan_config.c */
/* Which keys of a resolved config pick the decoder layers (plan_pick_of). */
typedef struct plan_pick {
    bool ck, layers;
} plan_pick_t;
plan_pick_t plan_pick_of(const json_t *cfg);
/* A key of the resolved config a planned config leaves out (its placement, the profiled
 * ranks of the old world, a secret, the layer keys the others replace). */
bool plan_yaml_skip(const char *key, const json_t *v, plan_pick_t pick);
/* One resolved value as YAML: numbers and booleans bare, lists and maps as written, strings
 * quoted. */
void plan_yaml_value(FILE *f, const json_t *v);
/* A path or name into a YAML comment: valid UTF-8 as it is, any other byte (and a control
 * character, which would end the comment) as \xNN, so the file stays YAML (libyaml
 * refuses a comment that is not UTF-8). */
void plan_comment_text(FILE *f, const char *s);
/* A report folder's summary.json into *doc (the caller frees it): MOE_ERR_INVALID_ARG with
 * why where the path is not there, is not a report folder, or its file is not a moed
 * summary. */
moe_status_t plan_summary_load(const char *dir, json_t **doc, moe_error_t *err);
/* p->doc's "config" parsed again for its run.world_size into p->old (not its placement). */
moe_status_t plan_old_config(plan_t *p, moe_error_t *err);

/* plan_trace.c */
double plan_ratio(const plan_pred_t *x); /* max/mean; 0 for nothing */
moe_status_t plan_trace_load(plan_t *p, moe_error_t *err);
moe_status_t plan_trace_predict(plan_t *p, moe_error_t *err);
void plan_trace_yaml_head(const plan_t *p, FILE *f);
void plan_trace_print(const plan_t *p, FILE *out);
void plan_trace_free(plan_t *p);

/* plan_check.c */
int plan_check_main(const plan_args_t *a, FILE *out);

#endif /* MOE_PLAN_INT_H */
