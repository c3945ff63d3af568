/* config_md: prints the config key table (runtime/src/config/config.c's cfg_keys) as the
 * Markdown table that docs/config.md holds between its "generated" markers. The test
 * docs.config_table compares the two; `tests/lint/docs_config_table.sh --update` rewrites
 * the file's table from this output. */
#include <stdio.h>

#include "moe_config/config.h"

int main(void)
{
    moe_cfg_print_reference_markdown(stdout);
    return fflush(stdout) == 0 ? 0 : 1;
}
