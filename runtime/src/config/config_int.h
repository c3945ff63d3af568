/* Private to the config part and its tests: checks on the key table itself.
 *
 * The table in config.c is the single declaration of every key; a mistake in it (a
 * default that does not parse, an offset into a field of the wrong size, two keys with
 * one path) would surface only as a wrong default at run time, so the unit test runs this
 * check instead. */
#ifndef MOE_CONFIG_INT_H
#define MOE_CONFIG_INT_H

#include <stddef.h>

#include "moe_config/config.h"
#include "moe/status.h"

/* Check every table entry: "section.leaf" path, unique, sections contiguous, field size
 * matching the type, bounds ordered, default parses and lies in its bounds. Returns
 * MOE_OK, or MOE_ERR_INTERNAL with the first bad entry named in err. */
moe_status_t moe_cfg_table_check(moe_error_t *err);

/* Number of keys in the table (for tests that walk it). */
size_t moe_cfg_table_size(void);

#endif /* MOE_CONFIG_INT_H */
