/* Reading the profiler's own JSON files (summary.json, trace.json) through jansson: loading
 * with errors that name "file:line:col", and the lookups `moed compare`, `moed plan` and the
 * tests chain.
 *
 * jansson's own getters already accept NULL and the wrong type (json_object_get,
 * json_array_get, json_string_value return NULL, json_array_size 0), so a chain such as
 * moe_json_num(json_object_get(json_object_get(doc, "run"), "tokens_per_s"), NAN) never
 * needs a check in between; the helpers here keep that property. */
#ifndef MOE_JSON_LOOKUP_H
#define MOE_JSON_LOOKUP_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "moe/status.h"

/* summary.json is kilobytes, trace.json megabytes: a larger file is not one moed wrote. */
#define MOE_JSON_MAX_FILE ((size_t)256 << 20)

/* Parse len bytes of JSON (an object or array; duplicate keys refused) into *out, released
 * with json_decref. On error returns MOE_ERR_FORMAT (MOE_ERR_NO_MEMORY), leaves *out NULL,
 * and err->msg reads "<name>:line:col: <problem>" ("line:col: ..." when name is NULL). */
moe_status_t moe_json_load(const char *text, size_t len, const char *name, json_t **out,
                           moe_error_t *err);
/* The same for a file; MOE_ERR_IO when it cannot be opened or read. */
moe_status_t moe_json_load_file(const char *path, json_t **out, moe_error_t *err);

/* Dotted path of object keys and array indices, "comm.bytes.0.1"; NULL when any step is
 * missing or of the wrong type. */
json_t *moe_json_path(const json_t *v, const char *path);
/* The number (integer or real), or fallback when v is NULL or not a number. */
double moe_json_num(const json_t *v, double fallback);
/* The string, or fallback when v is NULL or not a string. */
const char *moe_json_str(const json_t *v, const char *fallback);
/* Elements of an array or members of an object; 0 for anything else. */
size_t moe_json_count(const json_t *v);

#endif /* MOE_JSON_LOOKUP_H */
