/* A small strict JSON reader (RFC 8259) for the profiler's own files, and the two write
 * helpers its JSON writers share so they quote and print numbers the same way.
 *
 * The reader builds a tree (a DOM): `moed compare` reads two summary.json files, and the
 * tests read back every JSON file the report writes. It is strict (no comments, no trailing
 * commas, no NaN, no leading BOM), bounded (nesting depth, file size) and never crashes on
 * bad input: every error comes back as MOE_ERR_FORMAT with "line:col: what was expected". */
#ifndef MOE_JSON_READ_H
#define MOE_JSON_READ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "moe/status.h"

#define MOE_JSON_MAX_DEPTH 64                 /* nesting of arrays and objects */
#define MOE_JSON_MAX_FILE ((size_t)256 << 20) /* summary.json is kilobytes; trace.json MBs */

typedef enum {
    MOE_JSON_NULL = 0,
    MOE_JSON_BOOL,
    MOE_JSON_NUMBER,
    MOE_JSON_STRING,
    MOE_JSON_ARRAY,
    MOE_JSON_OBJECT,
} moe_json_type_t;

typedef struct moe_json moe_json_t;
struct moe_json {
    moe_json_type_t type;
    bool boolean;
    double number;
    char *string;      /* NUL-terminated UTF-8 (may hold NULs from \u0000: see len) */
    size_t len;        /* bytes of string */
    size_t count;      /* elements of an array, members of an object */
    moe_json_t *items; /* [count] array elements or object member values, in file order */
    char **keys;       /* [count] object member names (NULL for arrays) */
};

/* Parse `len` bytes of JSON text into a new tree (*out, freed with moe_json_free). On error
 * returns MOE_ERR_FORMAT (or MOE_ERR_NO_MEMORY), sets *out = NULL, and err->msg reads
 * "<name>:line:col: <problem>" (name may be NULL: then "line:col: ..."). */
moe_status_t moe_json_parse(const char *text, size_t len, const char *name, moe_json_t **out,
                            moe_error_t *err);
/* The same for a whole file; the message names the file. MOE_ERR_IO if it cannot be read. */
moe_status_t moe_json_parse_file(const char *path, moe_json_t **out, moe_error_t *err);
void moe_json_free(moe_json_t *v); /* accepts NULL */

/* Lookups: each returns NULL when v is NULL, of the wrong type, or lacks the member; so they
 * chain: moe_json_get(moe_json_get(doc, "run"), "tokens_per_s"). With duplicate keys the
 * first wins. */
const moe_json_t *moe_json_get(const moe_json_t *obj, const char *key);
const moe_json_t *moe_json_at(const moe_json_t *arr, size_t i);
/* Dotted path of object keys and array indices: "comm.bytes.0.1". */
const moe_json_t *moe_json_path(const moe_json_t *v, const char *path);
size_t moe_json_count(const moe_json_t *v); /* 0 unless an array or object */
bool moe_json_is(const moe_json_t *v, moe_json_type_t type);
double moe_json_number(const moe_json_t *v, double fallback); /* fallback unless a number */
const char *moe_json_string(const moe_json_t *v, const char *fallback);

/* Writers' helpers. A quoted, escaped JSON string (NULL writes null). */
void moe_json_put_string(FILE *f, const char *s);
/* A number with 9 significant digits (integers up to 2^53 exactly), or null when not
 * finite: JSON has no NaN or infinity. */
void moe_json_put_number(FILE *f, double x);

#endif /* MOE_JSON_READ_H */
