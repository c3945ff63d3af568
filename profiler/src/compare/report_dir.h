/* Whether a folder is a moed report folder (holds its summary.json), for `moed compare` and
 * `moed plan`, and if not, why not, in one line: a path that is not there (the system's
 * reason), a file, an incomplete report (its INCOMPLETE file names what is missing), a
 * profiler.output_dir holding run folders (the newest named), or another folder. */
#ifndef MOE_REPORT_DIR_H
#define MOE_REPORT_DIR_H

#include "moe/status.h"

/* MOE_OK when dir holds a summary.json; MOE_ERR_IO where dir is not there, MOE_ERR_FORMAT
 * for a folder that is not a report's, each with why in err. */
moe_status_t moe_report_dir_check(const char *dir, moe_error_t *err);

#endif /* MOE_REPORT_DIR_H */
