/* Routing traces: format moed-routing/1 (docs/routing.md), the routing a model made, token
 * by token and layer by layer, recorded by moed (profiler.record_routing), by a serving
 * engine or by Hugging Face transformers (profiler/tools/), and replayed by moed
 * (workload.routing) or planned from (moed plan --routing).
 *
 * A safetensors file (usually routing.safetensors) holding, for each layer L listed in the
 * metadata's "layers":
 *   layers.<L>.topk_ids      I32 [rows, top_k]  logical expert ids, distinct in a row
 *   layers.<L>.topk_weights  F32 [rows, top_k]  the weights the outputs are summed with
 * with the same rows in every layer (tokens in global order, step after step), and
 * __metadata__ (all values strings, as safetensors wants):
 *   format "moed-routing/1", num_experts, top_k, tokens_per_step ("0": not in steps),
 *   layers (a JSON list of the decoder layer indices, "[0, 1, 5]"), family, source,
 *   and optionally weights ("router" or "uniform": the source had no weights, 1/k each).
 *
 * The reader trusts nothing: every check below names the file and the tensor. */
#ifndef MOE_MODEL_ROUTING_TRACE_H
#define MOE_MODEL_ROUTING_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "moe/limits.h"
#include "moe/status.h"

#define MOE_ROUTING_FORMAT "moed-routing/1"
#define MOE_ROUTING_FILE "routing.safetensors"
/* Bytes of the metadata's source a reader keeps, NUL in: moed's own "moed run RUN" whole for
 * any run folder (MOE_PATH_MAX; an output_dir of 895 bytes and the run's name) */
#define MOE_ROUTING_SOURCE_MAX (MOE_PATH_MAX + 64)
/* Bytes of a trace file's path as read, NUL in (moe_routing_trace_t's path) */
#define MOE_ROUTING_PATH_MAX 4096
/* Bytes of a replay's words in the report, NUL in: "replayed PATH (SOURCE)", PATH a
 * moe_routing_trace_t's path and SOURCE its source */
#define MOE_ROUTING_REPLAYED_MAX (MOE_ROUTING_PATH_MAX + MOE_ROUTING_SOURCE_MAX + 128)

typedef struct moe_routing_trace {
    char path[MOE_ROUTING_PATH_MAX]; /* the file read (a folder's routing.safetensors resolved) */
    int num_layers;            /* layers in the file */
    int32_t *layer_ids;        /* [num_layers] decoder layer index L of each, file order */
    int num_experts, top_k;
    int64_t rows;              /* tokens per layer */
    int64_t tokens_per_step;   /* from the metadata; 0: not recorded in steps */
    char family[32];           /* "mixtral", ... or "" */
    char source[MOE_ROUTING_SOURCE_MAX]; /* "moed run experiments/...", "vLLM ...", ... */
    bool uniform_weights;      /* metadata weights: uniform (the source had none) */
    int32_t *ids;              /* [num_layers][rows][top_k]; NULL after a header read */
    float *weights;            /* [num_layers][rows][top_k]; NULL after a header read */
} moe_routing_trace_t;

/* PATH, or PATH/routing.safetensors when PATH is a folder, into out (out_len bytes).
 * -1 with errno when it is neither. */
int moe_routing_trace_resolve(const char *path, char *out, size_t out_len);

/* Open `path` (a file or a folder holding routing.safetensors) and check its header: the
 * format, the metadata, both tensors of every listed layer with the right dtypes and
 * shapes, no other layer tensors. With data, read every layer's ids and weights too and
 * check each row: ids in [0, num_experts), no id twice in one row, weights finite and not
 * negative. Errors (MOE_ERR_FORMAT for a file that is not a trace, MOE_ERR_IO when it
 * cannot be read) name the file and the tensor (and the row and column of a bad value). */
moe_status_t moe_routing_trace_open(const char *path, bool data, moe_routing_trace_t *out,
                                    moe_error_t *err);
void moe_routing_trace_free(moe_routing_trace_t *tr); /* accepts a zeroed one */

/* The index in tr of decoder layer `layer_id`, or -1. */
int moe_routing_trace_layer(const moe_routing_trace_t *tr, int32_t layer_id);

/* Whether tr's weights fit a model of `family` (a family's name; NULL: not known): a trace's
 * weights are its family's (normalised and scaled as it routes), so one of another family
 * does not; a trace without a family (an import that was not told the model) fits any.
 * The replay and `moed plan --routing` refuse the same traces by it. */
bool moe_routing_trace_fits_family(const moe_routing_trace_t *tr, const char *family);

/* Row r's ids and weights of the trace's layer index li (data read). */
static inline const int32_t *moe_routing_trace_ids(const moe_routing_trace_t *tr, int li,
                                                   int64_t r)
{
    return tr->ids + ((size_t)li * (size_t)tr->rows + (size_t)r) * (size_t)tr->top_k;
}
static inline const float *moe_routing_trace_weights(const moe_routing_trace_t *tr, int li,
                                                     int64_t r)
{
    return tr->weights + ((size_t)li * (size_t)tr->rows + (size_t)r) * (size_t)tr->top_k;
}

/* Tokens per expert of layer index li over rows [first, first + n) (cycling past the end),
 * into counts[num_experts] (overwritten). */
void moe_routing_trace_counts(const moe_routing_trace_t *tr, int li, int64_t first, int64_t n,
                              int64_t *counts);

/* What a writer gives: the metadata and, per layer, [rows, top_k] ids and weights. */
typedef struct moe_routing_out {
    int num_layers;
    const int32_t *layer_ids;  /* [num_layers] */
    int num_experts, top_k;
    int64_t rows, tokens_per_step;
    const char *family, *source;
    bool uniform_weights;
    const int32_t *const *ids; /* [num_layers] -> [rows * top_k] */
    const float *const *weights;
} moe_routing_out_t;

/* Bytes of the file moe_routing_trace_write would write (the header included). */
uint64_t moe_routing_trace_bytes(int num_layers, int64_t rows, int top_k);

/* Write the trace to `path` whole or not at all (tmp, fsync, rename). */
moe_status_t moe_routing_trace_write(const char *path, const moe_routing_out_t *t,
                                     moe_error_t *err);

#endif /* MOE_MODEL_ROUTING_TRACE_H */
