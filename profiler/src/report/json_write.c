/* JSON writers' helpers: strings escaped as RFC 8259 asks, numbers that read back exactly
 * where they are integers. */
#include "report/json_write.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

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
