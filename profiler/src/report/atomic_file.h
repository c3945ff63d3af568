/* A report file is whole or absent: it is written to <path>.part and renamed to <path> only
 * after every byte reached the disk (fflush, fsync, fclose all checked). A failed write
 * removes the .part, so nothing is left at <path> and the space is given back. A .part
 * that remains in a run folder is a write a kill interrupted. */
#ifndef MOE_REPORT_ATOMIC_FILE_H
#define MOE_REPORT_ATOMIC_FILE_H

#include <stddef.h>
#include <stdio.h>

#define MOE_AFILE_SUFFIX ".part"

/* <path>.part into out[n]; false when it does not fit. */
int moe_afile_part_name(char *out, size_t n, const char *path);

/* Open <path>.part for writing, truncated. NULL with *errnum set on failure. */
FILE *moe_afile_open(const char *path, int *errnum);

/* Flush, fsync and close f, then rename <path>.part to <path>. 0 on success; else the
 * errno of the first failure (a write error seen earlier on f counts), and <path>.part is
 * removed. f is closed either way. */
int moe_afile_commit(FILE *f, const char *path);

/* Close f (NULL is fine) and remove <path>.part: the file is given up. */
void moe_afile_abort(FILE *f, const char *path);

/* Sync the directory holding path, so a rename survives a crash; errno or 0. */
int moe_afile_sync_dir(const char *dir);

/* The whole of data[len] to path, atomically as above. 0 or errno. */
int moe_afile_write(const char *path, const void *data, size_t len);

#endif /* MOE_REPORT_ATOMIC_FILE_H */
