/* Whole-or-absent files: write to <path>.part, check every step, rename. See atomic_file.h. */
#include "report/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "moe/limits.h"

int moe_afile_part_name(char *out, size_t n, const char *path)
{
    int k = snprintf(out, n, "%s%s", path, MOE_AFILE_SUFFIX);
    return k >= 0 && (size_t)k < n;
}

FILE *moe_afile_open(const char *path, int *errnum)
{
    char part[MOE_PATH_MAX + 80];
    if (!moe_afile_part_name(part, sizeof(part), path)) {
        *errnum = ENAMETOOLONG;
        return NULL;
    }
    FILE *f = fopen(part, "w");
    if (f == NULL) {
        *errnum = errno != 0 ? errno : EIO;
    }
    return f;
}

void moe_afile_abort(FILE *f, const char *path)
{
    char part[MOE_PATH_MAX + 80];
    if (f != NULL) {
        fclose(f);
    }
    if (moe_afile_part_name(part, sizeof(part), path)) {
        unlink(part);
    }
}

/* Whether e is what a failed write says (so errno still holding it can be believed). */
static bool afile_write_errno(int e)
{
    return e == ENOSPC || e == EDQUOT || e == EFBIG || e == EIO || e == EROFS || e == EPERM ||
           e == EACCES;
}

/* The first failure of flush, fsync, close. stdio keeps no errno of a write that failed
 * earlier (the disk may have room again by now): errno still holding a write's error is
 * taken as the cause, else EIO. */
static int afile_finish(FILE *f)
{
    int e = 0, before = errno;
    bool had_error = ferror(f) != 0;
    errno = 0;
    if (fflush(f) != 0) {
        e = errno != 0 ? errno : EIO;
    } else if (had_error) {
        e = afile_write_errno(before) ? before : EIO;
    }
    if (e == 0 && fsync(fileno(f)) != 0) {
        e = errno;
    }
    if (fclose(f) != 0 && e == 0) {
        e = errno != 0 ? errno : EIO;
    }
    return e;
}

int moe_afile_commit(FILE *f, const char *path)
{
    char part[MOE_PATH_MAX + 80];
    if (!moe_afile_part_name(part, sizeof(part), path)) {
        fclose(f);
        return ENAMETOOLONG;
    }
    int e = afile_finish(f);
    if (e == 0 && rename(part, path) != 0) {
        e = errno;
    }
    if (e != 0) {
        unlink(part); /* a torn file is worse than none: and it gives the space back */
    }
    return e;
}

int moe_afile_sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) {
        return errno;
    }
    int e = fsync(fd) != 0 ? errno : 0;
    close(fd);
    return e == EINVAL ? 0 : e; /* some file systems cannot sync a directory */
}

int moe_afile_write(const char *path, const void *data, size_t len)
{
    int e = 0;
    FILE *f = moe_afile_open(path, &e);
    if (f == NULL) {
        return e;
    }
    if (len > 0 && fwrite(data, 1, len, f) != len) {
        e = errno != 0 ? errno : EIO;
        moe_afile_abort(f, path);
        return e;
    }
    return moe_afile_commit(f, path);
}
