/* UTF-8 checked strictly (no overlongs, no surrogates, nothing past U+10FFFF), for the
 * text moed writes into files other programs parse (safetensors' JSON header, YAML). Part
 * of the base layer. */
#ifndef MOE_UTF8_H
#define MOE_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Length of the valid UTF-8 sequence at p (1-4 bytes, p < end), its code point in *cp;
 * 0 when p does not start one. */
size_t moe_utf8_seq(const unsigned char *p, const unsigned char *end, uint32_t *cp);

#endif /* MOE_UTF8_H */
