/* Shared by the seed generators (gen_*_seeds.c): write one seed file into the corpus. */
#ifndef MOE_FUZZ_SEED_FILE_H
#define MOE_FUZZ_SEED_FILE_H

#include <stddef.h>
#include <stdio.h>

/* dir/name := data[0..len); 0 on success, 1 (after perror) on failure. */
static inline int write_file(const char *dir, const char *name, const void *data, size_t len)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
        perror(path);
        return 1;
    }
    printf("%s: %zu bytes\n", path, len);
    return 0;
}

#endif /* MOE_FUZZ_SEED_FILE_H */
