/* The whole-or-absent writer (report/atomic_file.c) and the INCOMPLETE marker (report.c),
 * with real faults: a file size limit (RLIMIT_FSIZE) makes a write fail midway. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "report/atomic_file.h"
#include "report/report.h"
#include "test_util.h"

static char dir[256];

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static char *slurp(const char *path)
{
    static char buf[8192];
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return NULL;
    }
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void test_write_ok(void)
{
    char path[512], part[600];
    snprintf(path, sizeof(path), "%s/ok.txt", dir);
    CHECK_INT_EQ(moe_afile_write(path, "hello\n", 6), 0);
    CHECK_INT_EQ(file_size(path), 6);
    CHECK(moe_afile_part_name(part, sizeof(part), path));
    CHECK(!exists(part));
}

/* Write 256 KiB under a 16 KiB file size limit: the write fails midway (EFBIG); nothing
 * is left at the final name, nor a .part; an older file at that name stays as it was. */
static void test_fail_midway(bool older)
{
    char path[512], part[600];
    snprintf(path, sizeof(path), "%s/big%d.json", dir, older);
    CHECK(moe_afile_part_name(part, sizeof(part), path));
    if (older) {
        CHECK_INT_EQ(moe_afile_write(path, "{\"old\": 1}\n", 11), 0);
    }
    struct rlimit saved, lim;
    CHECK_INT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
    lim = saved;
    lim.rlim_cur = 16 * 1024;
    CHECK_INT_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
    int e = 0;
    FILE *f = moe_afile_open(path, &e);
    CHECK(f != NULL);
    for (int i = 0; f != NULL && i < 256; i++) {
        char line[1024];
        memset(line, 'x', sizeof(line));
        fwrite(line, 1, sizeof(line), f); /* fails past 16 KiB; seen at commit */
    }
    e = f != NULL ? moe_afile_commit(f, path) : -1;
    CHECK_INT_EQ(setrlimit(RLIMIT_FSIZE, &saved), 0);
    CHECK(e != 0);
    CHECK(!exists(part));
    if (older) {
        const char *s = slurp(path);
        CHECK(s != NULL && strcmp(s, "{\"old\": 1}\n") == 0);
    } else {
        CHECK(!exists(path));
    }
}

static void test_abort(void)
{
    char path[512], part[600];
    snprintf(path, sizeof(path), "%s/given_up.csv", dir);
    CHECK(moe_afile_part_name(part, sizeof(part), path));
    int e = 0;
    FILE *f = moe_afile_open(path, &e);
    CHECK(f != NULL);
    if (f != NULL) {
        fputs("a,b\n1,", f);
    }
    CHECK(exists(part));
    moe_afile_abort(f, path);
    CHECK(!exists(part));
    CHECK(!exists(path));
}

/* A folder that is not there: the real errno comes back. */
static void test_open_errno(void)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/no/such/dir/x.txt", dir);
    int e = 0;
    CHECK(moe_afile_open(path, &e) == NULL);
    CHECK_INT_EQ(e, ENOENT);
    CHECK_INT_EQ(moe_afile_write(path, "x", 1), ENOENT);
}

static void test_incomplete_marker(void)
{
    moe_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.prof_trace = true;
    moe_report_t r;
    memset(&r, 0, sizeof(r));
    moe_report_files_t files;
    moe_report_files_init(&files, &cfg);
    r.cfg = &cfg;
    r.files = &files;
    r.metrics_stop_step = -1;
    snprintf(r.run_dir, sizeof(r.run_dir), "%s", dir);
    char path[512];
    snprintf(path, sizeof(path), "%s/INCOMPLETE", dir);

    moe_report_mark_incomplete(&r);
    const char *s = slurp(path);
    CHECK_STR_CONTAINS(s, "trace.json: not yet written");
    CHECK_STR_CONTAINS(s, "summary.json: not yet written");
    CHECK(moe_report_incomplete(&r));

    for (int i = 0; i < MOE_RFILE_COUNT; i++) {
        moe_report_file_done(&r, (moe_rfile_t)i, i == MOE_RFILE_TRACE ? ENOSPC : 0);
    }
    moe_report_mark_incomplete(&r);
    s = slurp(path);
    CHECK_STR_CONTAINS(s, "trace.json: not written: No space left on device");
    CHECK(s != NULL && strstr(s, "summary.json") == NULL);

    moe_report_file_done(&r, MOE_RFILE_TRACE, 0); /* a failure stays failed */
    CHECK(moe_report_incomplete(&r));
    files.state[MOE_RFILE_TRACE] = MOE_RFILE_WRITTEN;
    CHECK(!moe_report_incomplete(&r));
    r.metrics_write_failed = true;
    r.metrics_lost = 10;
    r.metrics_stop_step = 446;
    snprintf(r.metrics_stop_why, sizeof(r.metrics_stop_why), "No space left on device");
    CHECK(moe_report_incomplete(&r));
    moe_report_mark_incomplete(&r);
    CHECK_STR_CONTAINS(slurp(path), "metrics.csv: 10 rows from step 446 on not written");
    unlink(path);
}

int main(void)
{
    signal(SIGXFSZ, SIG_IGN); /* a write past RLIMIT_FSIZE fails with EFBIG instead */
    snprintf(dir, sizeof(dir), "%s/moed_test_afile_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    test_write_ok();
    test_fail_midway(false);
    test_fail_midway(true);
    test_abort();
    test_open_errno();
    test_incomplete_marker();
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "could not remove %s\n", dir);
    }
    return moe_test_finish("test_atomic_file");
}
