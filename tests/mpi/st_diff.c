/* st_diff A B [--tensor NAME] [--tol REL]: compare one tensor of two safetensors files.
 * Prints max |A-B|, max |A| and their ratio; exits 0 when ratio <= tol (default 1e-4),
 * 1 when it is larger or the shapes differ, 2 on a read error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe_model/safetensors.h"

static float *load(const char *path, const char *name, int64_t *n, const moe_st_tensor_info_t **ti,
                   moe_st_file_t **f)
{
    moe_error_t err;
    if (moe_st_open(path, f, &err) != MOE_OK) {
        fprintf(stderr, "st_diff: %s\n", err.msg);
        return NULL;
    }
    *ti = moe_st_find(*f, name);
    if (*ti == NULL) {
        fprintf(stderr, "st_diff: %s has no tensor '%s'\n", path, name);
        return NULL;
    }
    *n = 1;
    for (int d = 0; d < (*ti)->ndim; d++) {
        *n *= (*ti)->shape[d];
    }
    float *v = malloc((size_t)(*n > 0 ? *n : 1) * sizeof(float));
    if (v == NULL || moe_st_read_f32(*f, name, v, (size_t)*n, &err) != MOE_OK) {
        fprintf(stderr, "st_diff: %s\n", v == NULL ? "out of memory" : err.msg);
        free(v);
        return NULL;
    }
    return v;
}

int main(int argc, char **argv)
{
    const char *name = "output";
    double tol = 1e-4;
    if (argc < 3) {
        fprintf(stderr, "usage: st_diff A.safetensors B.safetensors [--tensor NAME] [--tol REL]\n");
        return 2;
    }
    for (int i = 3; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--tensor") == 0) {
            name = argv[i + 1];
        } else if (strcmp(argv[i], "--tol") == 0) {
            tol = atof(argv[i + 1]);
        }
    }
    moe_st_file_t *fa = NULL, *fb = NULL;
    const moe_st_tensor_info_t *ta = NULL, *tb = NULL;
    int64_t na = 0, nb = 0;
    float *a = load(argv[1], name, &na, &ta, &fa);
    float *b = a != NULL ? load(argv[2], name, &nb, &tb, &fb) : NULL;
    int rc = 2;
    if (a != NULL && b != NULL) {
        if (na != nb || ta->ndim != tb->ndim) {
            fprintf(stderr, "st_diff: shapes differ (%lld vs %lld elements)\n", (long long)na,
                    (long long)nb);
            rc = 1;
        } else {
            double max_diff = 0, max_abs = 0;
            for (int64_t i = 0; i < na; i++) {
                double d = fabs((double)a[i] - (double)b[i]);
                max_diff = d > max_diff || isnan(d) ? d : max_diff;
                max_abs = fabs((double)a[i]) > max_abs ? fabs((double)a[i]) : max_abs;
            }
            double rel = max_abs > 0 ? max_diff / max_abs : max_diff;
            printf("st_diff: %lld values, max |a-b| %.3g, max |a| %.3g, relative %.3g (tol %.1g)\n",
                   (long long)na, max_diff, max_abs, rel, tol);
            rc = rel <= tol && !isnan(rel) ? 0 : 1;
        }
    }
    free(a);
    free(b);
    moe_st_close(fa);
    moe_st_close(fb);
    return rc;
}
