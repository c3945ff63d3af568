/* Is a folder a moed report folder, and if not, why not (compare/report_dir.h). */
#include "compare/report_dir.h"

#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "moe/file.h"
#include "moe/limits.h"

/* dir/name exists (stat succeeds); *mtime its modification time. */
static bool dir_has(const char *dir, const char *name, time_t *mtime)
{
    char path[MOE_PATH_MAX + 300];
    struct stat st;
    int w = moe_path_join(path, sizeof(path), dir, name);
    if (w < 0 || (size_t)w >= sizeof(path) || stat(path, &st) != 0) {
        return false;
    }
    *mtime = st.st_mtime;
    return true;
}

/* The run folders in `dir` (a profiler.output_dir: folders holding a summary.json or an
 * INCOMPLETE): how many, and the newest two's names (by modification time) into
 * newest[0..1] ("" where fewer). */
static int run_folders(const char *dir, char newest[2][256])
{
    DIR *d = opendir(dir);
    time_t best[2] = {0, 0};
    int n = 0;
    newest[0][0] = newest[1][0] = '\0';
    for (struct dirent *e = d != NULL ? readdir(d) : NULL; e != NULL; e = readdir(d)) {
        char sub[MOE_PATH_MAX + 300];
        time_t t;
        if (e->d_name[0] == '.') {
            continue;
        }
        int w = moe_path_join(sub, sizeof(sub), dir, e->d_name);
        if (w < 0 || (size_t)w >= sizeof(sub) ||
            (!dir_has(sub, "summary.json", &t) && !dir_has(sub, "INCOMPLETE", &t))) {
            continue;
        }
        dir_has(sub, ".", &t); /* the folder's own time */
        n++;
        if (newest[0][0] == '\0' || t > best[0]) {
            memcpy(newest[1], newest[0], sizeof(newest[1]));
            best[1] = best[0];
            snprintf(newest[0], sizeof(newest[0]), "%s", e->d_name);
            best[0] = t;
        } else if (newest[1][0] == '\0' || t > best[1]) {
            snprintf(newest[1], sizeof(newest[1]), "%s", e->d_name);
            best[1] = t;
        }
    }
    if (d != NULL) {
        closedir(d);
    }
    return n;
}

/* A folder without summary.json: an incomplete report (its INCOMPLETE says why), a
 * folder of runs (named), or neither. */
static moe_status_t not_report(const char *dir, moe_error_t *err)
{
    char newest[2][256], path[2][MOE_PATH_MAX + 300];
    time_t t;
    if (dir_has(dir, "INCOMPLETE", &t)) {
        moe_path_join(path[0], sizeof(path[0]), dir, "INCOMPLETE");
        return moe_error_set(err, MOE_ERR_FORMAT,
                             "%s: an incomplete report (no summary.json: the run ended before "
                             "its report was written, or is still writing it); %s says which "
                             "files are missing and why",
                             dir, path[0]);
    }
    int n = run_folders(dir, newest);
    if (n == 0) {
        return moe_error_set(err, MOE_ERR_FORMAT,
                             "%s: not a moed report folder (no summary.json in it)", dir);
    }
    moe_path_join(path[0], sizeof(path[0]), dir, newest[0]);
    moe_path_join(path[1], sizeof(path[1]), dir, newest[1]);
    return moe_error_set(err, MOE_ERR_FORMAT,
                         "%s: not a moed report folder but a folder of %d run folder%s; give "
                         "one: the newest is %s%s%s",
                         dir, n, n > 1 ? "s" : "", path[0],
                         newest[1][0] != '\0' ? ", the one before " : "",
                         newest[1][0] != '\0' ? path[1] : "");
}

moe_status_t moe_report_dir_check(const char *dir, moe_error_t *err)
{
    char path[MOE_PATH_MAX + 32];
    struct stat st;
    if (stat(dir, &st) != 0) {
        return moe_error_set(err, MOE_ERR_IO, "%s: %s", dir, strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) {
        return moe_error_set(err, MOE_ERR_FORMAT,
                             "%s: not a moed report folder (not a folder; give the run's folder, "
                             "such as experiments/2025-11-21__07-05-00_ab12cd34)",
                             dir);
    }
    moe_path_join(path, sizeof(path), dir, "summary.json");
    if (stat(path, &st) != 0) {
        return not_report(dir, err);
    }
    return MOE_OK;
}
