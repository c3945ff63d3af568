/* Strict JSON reader: recursive descent over a bounded depth, one tree of nodes whose
 * children live in one array per parent. Errors name line:col of the byte that broke the
 * grammar; the first error wins and parsing unwinds. */
#include "compare/json_read.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct json_parser {
    const unsigned char *s;
    size_t len;
    size_t pos;
    const char *name;
    moe_error_t *err;
    moe_status_t st;
} json_parser_t;

/* Line and column (1-based, columns in bytes) of the parser's position. */
static void json_where(const json_parser_t *p, int *line, int *col)
{
    size_t ln = 1, c = 1;
    for (size_t i = 0; i < p->pos && i < p->len; i++) {
        if (p->s[i] == '\n') {
            ln++;
            c = 1;
        } else {
            c++;
        }
    }
    *line = ln > INT32_MAX ? INT32_MAX : (int)ln;
    *col = c > INT32_MAX ? INT32_MAX : (int)c;
}

static moe_status_t json_fail(json_parser_t *p, moe_status_t code, const char *what)
{
    if (p->st != MOE_OK) {
        return p->st; /* keep the first error: later ones are consequences */
    }
    int line, col;
    json_where(p, &line, &col);
    const char *eof = p->pos >= p->len && code == MOE_ERR_FORMAT ? "unexpected end of input: " : "";
    if (code == MOE_ERR_NO_MEMORY) {
        moe_error_set(p->err, code, "%s%sout of memory reading JSON", p->name ? p->name : "",
                      p->name ? ": " : "");
    } else {
        moe_error_set(p->err, code, "%s%s%d:%d: %s%s", p->name ? p->name : "", p->name ? ":" : "",
                      line, col, eof, what);
    }
    p->st = code;
    return code;
}

static void json_skip_ws(json_parser_t *p)
{
    while (p->pos < p->len) {
        unsigned char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
            return;
        }
        p->pos++;
    }
}

static bool json_peek(const json_parser_t *p, unsigned char c)
{
    return p->pos < p->len && p->s[p->pos] == c;
}

/* Grows *arr (of elem-byte items, capacity *cap) to hold at least need items. */
static bool json_grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) {
        return true;
    }
    size_t ncap = *cap ? *cap * 2 : 8;
    ncap = ncap < need ? need : ncap;
    if (ncap > SIZE_MAX / elem) {
        return false;
    }
    void *n = realloc(*arr, ncap * elem);
    if (n == NULL) {
        return false;
    }
    *arr = n;
    *cap = ncap;
    return true;
}

static void json_free_children(moe_json_t *v)
{
    for (size_t i = 0; i < v->count; i++) {
        json_free_children(&v->items[i]);
        if (v->keys != NULL) {
            free(v->keys[i]);
        }
    }
    free(v->items);
    free(v->keys);
    free(v->string);
    memset(v, 0, sizeof(*v));
}

void moe_json_free(moe_json_t *v)
{
    if (v == NULL) {
        return;
    }
    json_free_children(v);
    free(v);
}

/* ---- literals and numbers -------------------------------------------------------- */

static moe_status_t json_literal(json_parser_t *p, moe_json_t *v)
{
    static const struct {
        const char *word;
        moe_json_type_t type;
        bool b;
    } lits[] = {
        {"true", MOE_JSON_BOOL, true},
        {"false", MOE_JSON_BOOL, false},
        {"null", MOE_JSON_NULL, false},
    };
    for (size_t i = 0; i < sizeof(lits) / sizeof(lits[0]); i++) {
        size_t n = strlen(lits[i].word);
        if (p->len - p->pos >= n && memcmp(p->s + p->pos, lits[i].word, n) == 0) {
            p->pos += n;
            v->type = lits[i].type;
            v->boolean = lits[i].b;
            return MOE_OK;
        }
    }
    return json_fail(p, MOE_ERR_FORMAT,
                     "expected a value (object, array, string, number, "
                     "true, false or null)");
}

static size_t json_digits(const json_parser_t *p, size_t at)
{
    size_t n = 0;
    while (at + n < p->len && p->s[at + n] >= '0' && p->s[at + n] <= '9') {
        n++;
    }
    return n;
}

/* Length of a number per the JSON grammar starting at p->pos, or 0 if malformed. */
static size_t json_number_span(const json_parser_t *p)
{
    size_t i = p->pos;
    if (i < p->len && p->s[i] == '-') {
        i++;
    }
    size_t d = json_digits(p, i);
    if (d == 0 || (d > 1 && p->s[i] == '0')) {
        return 0; /* no digits, or a leading zero */
    }
    i += d;
    if (i < p->len && p->s[i] == '.') {
        d = json_digits(p, i + 1);
        if (d == 0) {
            return 0;
        }
        i += 1 + d;
    }
    if (i < p->len && (p->s[i] == 'e' || p->s[i] == 'E')) {
        i++;
        if (i < p->len && (p->s[i] == '+' || p->s[i] == '-')) {
            i++;
        }
        d = json_digits(p, i);
        if (d == 0) {
            return 0;
        }
        i += d;
    }
    return i - p->pos;
}

static moe_status_t json_number(json_parser_t *p, moe_json_t *v)
{
    char buf[128];
    size_t n = json_number_span(p);
    if (n == 0) {
        return json_fail(p, MOE_ERR_FORMAT, "malformed number");
    }
    if (n >= sizeof(buf)) {
        return json_fail(p, MOE_ERR_FORMAT, "number longer than 127 characters");
    }
    memcpy(buf, p->s + p->pos, n); /* the text need not be NUL-terminated for strtod */
    buf[n] = '\0';
    errno = 0;
    double x = strtod(buf, NULL);
    if (!isfinite(x)) {
        return json_fail(p, MOE_ERR_FORMAT, "number out of the range of a double");
    }
    p->pos += n;
    v->type = MOE_JSON_NUMBER;
    v->number = x;
    return MOE_OK;
}

/* ---- strings --------------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s (avail bytes), or 0: no overlongs, no
 * surrogates, nothing above U+10FFFF. */
static size_t json_utf8_len(const unsigned char *s, size_t avail)
{
    unsigned c = s[0];
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || n > avail) {
        return 0;
    }
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            return 0;
        }
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        return 0;
    }
    return n;
}

static size_t json_put_utf8(char *out, uint32_t cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static bool json_hex4(const json_parser_t *p, size_t at, uint32_t *out)
{
    uint32_t v = 0;
    if (at + 4 > p->len) {
        return false;
    }
    for (size_t i = 0; i < 4; i++) {
        unsigned char c = p->s[at + i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) {
            return false;
        }
        v = v * 16 + (uint32_t)d;
    }
    *out = v;
    return true;
}

/* \uXXXX at p->pos (the backslash), a surrogate pair taken whole; advances past it. */
static moe_status_t json_unicode_escape(json_parser_t *p, uint32_t *cp)
{
    uint32_t hi, lo;
    if (!json_hex4(p, p->pos + 2, &hi)) {
        return json_fail(p, MOE_ERR_FORMAT, "\\u must be followed by 4 hex digits");
    }
    if (hi >= 0xDC00 && hi <= 0xDFFF) {
        return json_fail(p, MOE_ERR_FORMAT, "unpaired low surrogate in \\u escape");
    }
    if (hi < 0xD800 || hi > 0xDBFF) {
        p->pos += 6;
        *cp = hi;
        return MOE_OK;
    }
    if (p->pos + 12 > p->len || p->s[p->pos + 6] != '\\' || p->s[p->pos + 7] != 'u' ||
        !json_hex4(p, p->pos + 8, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
        return json_fail(p, MOE_ERR_FORMAT, "high surrogate not followed by a low one");
    }
    p->pos += 12;
    *cp = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
    return MOE_OK;
}

/* One escape at p->pos (the backslash) into out; returns bytes written or 0 on error. */
static size_t json_escape(json_parser_t *p, char *out)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    if (p->pos + 1 >= p->len) {
        json_fail(p, MOE_ERR_FORMAT, "unterminated string");
        return 0;
    }
    unsigned char c = p->s[p->pos + 1];
    const char *hit = c != '\0' ? strchr(from, c) : NULL;
    if (hit != NULL) {
        out[0] = to[hit - from];
        p->pos += 2;
        return 1;
    }
    uint32_t cp = 0;
    if (c != 'u') {
        json_fail(p, MOE_ERR_FORMAT, "invalid escape in string");
        return 0;
    }
    return json_unicode_escape(p, &cp) == MOE_OK ? json_put_utf8(out, cp) : 0;
}

/* A string at p->pos (the opening quote) into a new NUL-terminated buffer. */
static moe_status_t json_string_raw(json_parser_t *p, char **out, size_t *out_len)
{
    /* the decoded text is never longer than the quoted text */
    char *buf = malloc(p->len - p->pos + 1);
    size_t n = 0;
    if (buf == NULL) {
        return json_fail(p, MOE_ERR_NO_MEMORY, "");
    }
    p->pos++;
    for (;;) {
        if (p->pos >= p->len) {
            json_fail(p, MOE_ERR_FORMAT, "unterminated string");
            goto free_buf;
        }
        unsigned char c = p->s[p->pos];
        if (c == '"') {
            break;
        }
        if (c < 0x20) {
            json_fail(p, MOE_ERR_FORMAT, "control character in string (escape it)");
            goto free_buf;
        }
        size_t k =
            c == '\\' ? json_escape(p, buf + n) : json_utf8_len(p->s + p->pos, p->len - p->pos);
        if (k == 0) {
            json_fail(p, MOE_ERR_FORMAT, "invalid UTF-8 in string");
            goto free_buf;
        }
        if (c != '\\') {
            memcpy(buf + n, p->s + p->pos, k);
            p->pos += k;
        }
        n += k;
    }
    p->pos++;
    buf[n] = '\0';
    *out = buf;
    *out_len = n;
    return MOE_OK;
free_buf:
    free(buf);
    return p->st;
}

/* ---- arrays, objects, values ----------------------------------------------------- */

static moe_status_t json_value(json_parser_t *p, moe_json_t *v, int depth);

/* Shared loop of arrays and objects: members separated by commas until `close`. */
static moe_status_t json_members(json_parser_t *p, moe_json_t *v, int depth, bool object)
{
    size_t cap = 0, kcap = 0;
    unsigned char close = object ? '}' : ']';
    p->pos++;
    json_skip_ws(p);
    if (json_peek(p, close)) {
        p->pos++;
        return MOE_OK;
    }
    for (;;) {
        if (!json_grow((void **)&v->items, &cap, v->count + 1, sizeof(moe_json_t)) ||
            (object && !json_grow((void **)&v->keys, &kcap, v->count + 1, sizeof(char *)))) {
            return json_fail(p, MOE_ERR_NO_MEMORY, "");
        }
        moe_json_t *item = &v->items[v->count];
        memset(item, 0, sizeof(*item));
        if (object) {
            size_t klen;
            json_skip_ws(p);
            if (!json_peek(p, '"')) {
                return json_fail(p, MOE_ERR_FORMAT, "expected a member name in double quotes");
            }
            v->keys[v->count] = NULL;
            if (json_string_raw(p, &v->keys[v->count], &klen) != MOE_OK) {
                return p->st;
            }
            v->count++; /* counted now so the key is freed on any later error */
            json_skip_ws(p);
            if (!json_peek(p, ':')) {
                return json_fail(p, MOE_ERR_FORMAT, "expected ':' after the member name");
            }
            p->pos++;
        } else {
            v->count++;
        }
        if (json_value(p, item, depth + 1) != MOE_OK) {
            return p->st;
        }
        json_skip_ws(p);
        if (json_peek(p, close)) {
            p->pos++;
            return MOE_OK;
        }
        if (!json_peek(p, ',')) {
            return json_fail(p, MOE_ERR_FORMAT,
                             object ? "expected ',' or '}' after a member"
                                    : "expected ',' or ']' after an element");
        }
        p->pos++;
        json_skip_ws(p);
        if (json_peek(p, close)) {
            return json_fail(p, MOE_ERR_FORMAT, "trailing comma");
        }
    }
}

static moe_status_t json_value(json_parser_t *p, moe_json_t *v, int depth)
{
    json_skip_ws(p);
    if (depth > MOE_JSON_MAX_DEPTH) {
        return json_fail(p, MOE_ERR_FORMAT, "nested deeper than 64 levels");
    }
    if (p->pos >= p->len) {
        return json_fail(p, MOE_ERR_FORMAT, "expected a value");
    }
    unsigned char c = p->s[p->pos];
    switch (c) {
    case '{': v->type = MOE_JSON_OBJECT; return json_members(p, v, depth, true);
    case '[': v->type = MOE_JSON_ARRAY; return json_members(p, v, depth, false);
    case '"': v->type = MOE_JSON_STRING; return json_string_raw(p, &v->string, &v->len);
    default:
        if (c == '-' || (c >= '0' && c <= '9')) {
            return json_number(p, v);
        }
        return json_literal(p, v);
    }
}

moe_status_t moe_json_parse(const char *text, size_t len, const char *name, moe_json_t **out,
                            moe_error_t *err)
{
    json_parser_t p = {(const unsigned char *)text, len, 0, name, err, MOE_OK};
    moe_json_t *root = calloc(1, sizeof(*root));
    *out = NULL;
    if (root == NULL) {
        return json_fail(&p, MOE_ERR_NO_MEMORY, "");
    }
    if (text == NULL) {
        p.len = 0;
    }
    if (json_value(&p, root, 0) == MOE_OK) {
        json_skip_ws(&p);
        if (p.pos < p.len) {
            json_fail(&p, MOE_ERR_FORMAT, "unexpected text after the JSON value");
        }
    }
    if (p.st != MOE_OK) {
        moe_json_free(root);
        return p.st;
    }
    *out = root;
    return MOE_OK;
}

/* Whole file into a malloc'd buffer, bounded by MOE_JSON_MAX_FILE. */
static moe_status_t json_slurp(const char *path, char **text, size_t *len, moe_error_t *err)
{
    size_t cap = 0, n = 0;
    char *buf = NULL;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return moe_error_set(err, MOE_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    for (;;) {
        if (!json_grow((void **)&buf, &cap, n + 65536, 1)) {
            moe_error_set(err, MOE_ERR_NO_MEMORY, "%s: out of memory reading it", path);
            goto close_file;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n > MOE_JSON_MAX_FILE) {
            moe_error_set(err, MOE_ERR_FORMAT, "%s: larger than %zu MiB: not a moed file", path,
                          MOE_JSON_MAX_FILE >> 20);
            goto close_file;
        }
        if (got == 0) {
            break;
        }
    }
    if (ferror(f)) {
        moe_error_set(err, MOE_ERR_IO, "%s: read error", path);
        goto close_file;
    }
    fclose(f);
    *text = buf;
    *len = n;
    return MOE_OK;
close_file:
    fclose(f);
    free(buf);
    return err != NULL ? err->code : MOE_ERR_IO;
}

moe_status_t moe_json_parse_file(const char *path, moe_json_t **out, moe_error_t *err)
{
    char *text = NULL;
    size_t len = 0;
    *out = NULL;
    moe_status_t st = json_slurp(path, &text, &len, err);
    if (st != MOE_OK) {
        return st;
    }
    st = moe_json_parse(text, len, path, out, err);
    free(text);
    return st;
}

/* ---- lookups --------------------------------------------------------------------- */

const moe_json_t *moe_json_get(const moe_json_t *obj, const char *key)
{
    if (obj == NULL || obj->type != MOE_JSON_OBJECT || key == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < obj->count; i++) {
        if (strcmp(obj->keys[i], key) == 0) {
            return &obj->items[i];
        }
    }
    return NULL;
}

const moe_json_t *moe_json_at(const moe_json_t *arr, size_t i)
{
    if (arr == NULL || arr->type != MOE_JSON_ARRAY || i >= arr->count) {
        return NULL;
    }
    return &arr->items[i];
}

const moe_json_t *moe_json_path(const moe_json_t *v, const char *path)
{
    char part[128];
    while (v != NULL && path != NULL && *path != '\0') {
        size_t n = strcspn(path, ".");
        if (n >= sizeof(part)) {
            return NULL;
        }
        memcpy(part, path, n);
        part[n] = '\0';
        if (v->type == MOE_JSON_ARRAY) {
            char *end;
            unsigned long long i = strtoull(part, &end, 10);
            v = (n > 0 && *end == '\0') ? moe_json_at(v, (size_t)i) : NULL;
        } else {
            v = moe_json_get(v, part);
        }
        path += n + (path[n] == '.' ? 1 : 0);
    }
    return v;
}

size_t moe_json_count(const moe_json_t *v)
{
    return v != NULL && (v->type == MOE_JSON_ARRAY || v->type == MOE_JSON_OBJECT) ? v->count : 0;
}

bool moe_json_is(const moe_json_t *v, moe_json_type_t type)
{
    return v != NULL && v->type == type;
}

double moe_json_number(const moe_json_t *v, double fallback)
{
    return v != NULL && v->type == MOE_JSON_NUMBER ? v->number : fallback;
}

const char *moe_json_string(const moe_json_t *v, const char *fallback)
{
    return v != NULL && v->type == MOE_JSON_STRING ? v->string : fallback;
}

/* ---- writers' helpers ------------------------------------------------------------ */

void moe_json_put_string(FILE *f, const char *s)
{
    if (s == NULL) {
        fputs("null", f);
        return;
    }
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)s; *c != '\0'; c++) {
        if (*c >= 0x80) {
            /* copy valid UTF-8 whole; a stray byte becomes U+FFFD so the file stays valid */
            size_t k = json_utf8_len(c, strnlen((const char *)c, 4));
            if (k == 0) {
                fputs("\\ufffd", f);
            } else {
                fwrite(c, 1, k, f);
                c += k - 1;
            }
            continue;
        }
        switch (*c) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (*c < 0x20 || *c == 0x7F) {
                fprintf(f, "\\u%04x", *c);
            } else {
                fputc(*c, f);
            }
        }
    }
    fputc('"', f);
}

void moe_json_put_number(FILE *f, double x)
{
    if (!isfinite(x)) {
        fputs("null", f);
    } else if (x == floor(x) && fabs(x) < 9007199254740992.0) {
        fprintf(f, "%.0f", x == 0.0 ? 0.0 : x); /* integers exactly, and no "-0" */
    } else {
        fprintf(f, "%.9g", x);
    }
}
