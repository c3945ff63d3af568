/* jansson loading with file:line:col errors, and chainable lookups. */
#include "compare/json_lookup.h"
#include "moe/file.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define JSON_LOAD_FLAGS JSON_REJECT_DUPLICATES

static moe_status_t json_fail(const char *name, const json_error_t *je, moe_error_t *err)
{
    moe_status_t code =
        json_error_code(je) == json_error_out_of_memory ? MOE_ERR_NO_MEMORY : MOE_ERR_FORMAT;
    return moe_error_set(err, code, "%s%s%d:%d: %s", name ? name : "", name ? ":" : "",
                         je->line, je->column, je->text);
}

moe_status_t moe_json_load(const char *text, size_t len, const char *name, json_t **out,
                           moe_error_t *err)
{
    json_error_t je;
    *out = NULL;
    if (text == NULL) {
        return moe_error_set(err, MOE_ERR_FORMAT, "%s%s1:0: no JSON text", name ? name : "",
                             name ? ":" : "");
    }
    json_t *doc = json_loadb(text, len, JSON_LOAD_FLAGS, &je);
    if (doc == NULL) {
        return json_fail(name, &je, err);
    }
    *out = doc;
    return MOE_OK;
}

moe_status_t moe_json_load_file(const char *path, json_t **out, moe_error_t *err)
{
    struct stat st;
    json_error_t je;
    moe_status_t rc = MOE_OK;
    *out = NULL;
    const char *kind = NULL;
    FILE *f = moe_file_fopen_regular(path, "rb", &kind); /* a FIFO would wait for a writer */
    if (f == NULL) {
        return kind != NULL ? moe_error_set(err, MOE_ERR_IO, "%s: is %s, not a regular file",
                                            path, kind)
                            : moe_error_set(err, MOE_ERR_IO, "%s: cannot open: %s", path,
                                            strerror(errno));
    }
    if (fstat(fileno(f), &st) == 0 && (uint64_t)st.st_size > MOE_JSON_MAX_FILE) {
        rc = moe_error_set(err, MOE_ERR_FORMAT, "%s: larger than %zu MiB: not a moed file",
                           path, MOE_JSON_MAX_FILE >> 20);
        goto close_file;
    }
    json_t *doc = json_loadf(f, JSON_LOAD_FLAGS, &je);
    if (doc == NULL) {
        rc = ferror(f) ? moe_error_set(err, MOE_ERR_IO, "%s: read error", path)
                       : json_fail(path, &je, err);
        goto close_file;
    }
    *out = doc;
close_file:
    fclose(f);
    return rc;
}

json_t *moe_json_path(const json_t *v, const char *path)
{
    char part[128];
    json_t *at = (json_t *)v;
    while (at != NULL && path != NULL && *path != '\0') {
        size_t n = strcspn(path, ".");
        if (n >= sizeof(part)) {
            return NULL;
        }
        memcpy(part, path, n);
        part[n] = '\0';
        if (json_is_array(at)) {
            char *end;
            unsigned long long i = strtoull(part, &end, 10);
            at = (n > 0 && *end == '\0') ? json_array_get(at, (size_t)i) : NULL;
        } else {
            at = json_object_get(at, part);
        }
        path += n + (path[n] == '.' ? 1 : 0);
    }
    return at;
}

double moe_json_num(const json_t *v, double fallback)
{
    return json_is_number(v) ? json_number_value(v) : fallback;
}

const char *moe_json_str(const json_t *v, const char *fallback)
{
    const char *s = json_string_value(v);
    return s != NULL ? s : fallback;
}

size_t moe_json_count(const json_t *v)
{
    return json_is_object(v) ? json_object_size(v) : json_array_size(v);
}
