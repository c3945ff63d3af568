/* Helpers the report tests share (test_report.c, test_merge.c): a file read whole, counts of
 * lines and substrings, the headline as rank 0 prints it. */
#ifndef MOE_TEST_REPORT_UTIL_H
#define MOE_TEST_REPORT_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/report.h"
#include "test_util.h"

/* dir/name read whole and NUL-terminated (malloc'd; NULL if unreadable); *len its size. */
static inline char *slurp(const char *dir, const char *name, size_t *len)
{
    char path[MOE_PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf != NULL) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) {
            break;
        }
        char *nb = realloc(buf, 2 * cap + 1);
        if (nb == NULL) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    fclose(f);
    if (buf != NULL) {
        buf[n] = '\0';
    }
    if (len != NULL) {
        *len = n;
    }
    return buf;
}

static inline size_t count_lines(const char *s)
{
    size_t n = 0;
    for (; s != NULL && *s; s++) {
        n += *s == '\n';
    }
    return n;
}

static inline size_t count_substr(const char *s, const char *needle)
{
    size_t n = 0;
    for (const char *p = s; p != NULL && (p = strstr(p, needle)) != NULL; p += strlen(needle)) {
        n++;
    }
    return n;
}

/* What moe_report_print_headline prints for r (malloc'd). */
static inline char *headline_of(const moe_report_t *r)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(f != NULL);
    if (f == NULL) {
        return NULL;
    }
    moe_report_print_headline(r, f);
    fclose(f);
    return buf;
}

#endif /* MOE_TEST_REPORT_UTIL_H */
