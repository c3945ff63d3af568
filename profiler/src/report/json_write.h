/* The two helpers the report's JSON writers (summary.json, trace.json) share, so they
 * quote strings and print numbers the same way. Reading JSON goes through jansson. */
#ifndef MOE_JSON_WRITE_H
#define MOE_JSON_WRITE_H

#include <stdio.h>

/* A quoted, escaped JSON string (NULL writes null). Invalid UTF-8 becomes U+FFFD so the
 * file stays valid JSON. */
void moe_json_put_string(FILE *f, const char *s);
/* A number with 9 significant digits (integers up to 2^53 exactly), or null when not
 * finite: JSON has no NaN or infinity. */
void moe_json_put_number(FILE *f, double x);

#endif /* MOE_JSON_WRITE_H */
