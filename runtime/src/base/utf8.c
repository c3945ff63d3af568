/* UTF-8 checked strictly (moe/utf8.h). */
#include "moe/utf8.h"

size_t moe_utf8_seq(const unsigned char *p, const unsigned char *end, uint32_t *cp)
{
    size_t len;
    uint32_t c, min;
    if (p[0] < 0x80) {
        *cp = p[0];
        return 1;
    }
    if (p[0] >= 0xC2 && p[0] <= 0xDF) {
        len = 2, c = p[0] & 0x1Fu, min = 0x80;
    } else if ((p[0] & 0xF0) == 0xE0) {
        len = 3, c = p[0] & 0x0Fu, min = 0x800;
    } else if (p[0] >= 0xF0 && p[0] <= 0xF4) {
        len = 4, c = p[0] & 0x07u, min = 0x10000;
    } else {
        return 0;
    }
    if ((size_t)(end - p) < len) {
        return 0;
    }
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80) {
            return 0;
        }
        c = (c << 6) | (p[i] & 0x3Fu);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) {
        return 0;
    }
    *cp = c;
    return len;
}
