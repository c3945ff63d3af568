/*
 * bench_blas: compare CPU BLAS libraries on the SGEMM shapes moed's experts run.
 *
 * A standalone benchmark (not a test). It loads OpenBLAS, BLIS and oneDNN with
 * dlopen(RTLD_NOW | RTLD_LOCAL), so their identical cblas_sgemm symbols do not
 * clash and nothing but -ldl -lm is needed at link time, then times
 *
 *     C[M,N] = A[M,K] * B[N,K]^T          (row major, fp32)
 *
 * i.e. cblas_sgemm(RowMajor, NoTrans, Trans, M, N, K, 1, A, K, B, K, 0, C, N)
 * and dnnl_sgemm('N', 'T', ...) for oneDNN, which is row major.
 *
 * Shapes (moed defaults: hidden H=1024, ffn F=3584, 8 experts, top_k 2,
 * 2048 tokens per step, so about M=512 rows per expert):
 *   up+gate (fused)  M x 2F x H    for M in {64,128,256,512,1024,2048}
 *   down             M x H  x F    for the same M
 *   router gate      2048 x 8 x 1024
 *   Mixtral-like     H=4096 F=14336 M=128: up+gate (fused) and down
 *
 * For every library x shape x thread count: warm up, then repeat until at
 * least MIN_TIME seconds and 3 repetitions have run; report the best and the
 * median GFLOP/s (2*M*N*K / time) and the CPU time / wall time ratio of the
 * timed loop, which shows how many cores the library really kept busy.
 * Results are checked against the first library that ran (max |dC| / max |C|
 * below 1e-3); the exit status is 1 when a check fails.
 *
 * Usage: bench_blas [--quick] [--threads N] [--help]
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* CBLAS enum values, so that no cblas.h is needed. */
enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };

typedef void (*cblas_sgemm_fn)(int order, int transa, int transb, int m, int n, int k,
                               float alpha, const float *a, int lda, const float *b,
                               int ldb, float beta, float *c, int ldc);
typedef int (*dnnl_sgemm_fn)(char transa, char transb, int64_t m, int64_t n, int64_t k,
                             float alpha, const float *a, int64_t lda, const float *b,
                             int64_t ldb, float beta, float *c, int64_t ldc);
/* Same layout as dnnl_version_t in oneDNN 2.x. */
typedef struct {
  int major, minor, patch;
  const char *hash;
  unsigned cpu_runtime, gpu_runtime;
} dnnl_version_info;

#define CHECK_TOL 1e-3
#define MAX_THREAD_SETTINGS 2
#define SETTLE_SECONDS 0.2   /* pause between measurements, lets spinning pool threads sleep */
#define WARMUP_SECONDS 0.1
#define MEMCPY_BYTES ((size_t)256 << 20)

enum lib_kind { LIB_OPENBLAS, LIB_BLIS, LIB_DNNL, NLIBS };

typedef struct {
  enum lib_kind kind;
  const char *name;
  const char *soname;
  void *handle;
  int loaded;
  char info[256];
  cblas_sgemm_fn cblas_sgemm;
  dnnl_sgemm_fn dnnl_sgemm;
  void (*openblas_set_num_threads)(int);
  int (*openblas_get_num_threads)(void);
  void (*bli_thread_set_num_threads)(int64_t);
  int64_t (*bli_thread_get_num_threads)(void);
  void (*omp_set_num_threads)(int);
  int (*omp_get_max_threads)(void);
} blas_lib;

static blas_lib libs[NLIBS] = {
    {.kind = LIB_OPENBLAS, .name = "openblas", .soname = "libopenblas.so.0"},
    {.kind = LIB_BLIS, .name = "blis", .soname = "libblis.so.4"},
    {.kind = LIB_DNNL, .name = "dnnl", .soname = "libdnnl.so.2"},
};

typedef struct {
  const char *name;
  int m, n, k;
  int expert; /* counts towards the expert-shape summary */
} shape_t;

typedef struct {
  int ran;      /* measurement done */
  int failed;   /* call returned an error */
  int check_ok; /* agrees with the reference library */
  int is_ref;
  int reps;
  double best_s, median_s, cpu_ratio, rel_diff;
} result_t;

/* ---------------------------------------------------------------- helpers */

static double wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_seconds(double s) {
  struct timespec ts;
  ts.tv_sec = (time_t)s;
  ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static void *alloc_aligned(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  return aligned_alloc(64, rounded ? rounded : 64);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void fill_random(float *p, size_t n, uint32_t seed) {
  uint32_t s = seed ? seed : 1u;
  for (size_t i = 0; i < n; i++) {
    s ^= s << 13;
    s ^= s >> 17;
    s ^= s << 5;
    p[i] = (float)((double)s / 2147483648.0 - 1.0); /* [-1, 1) */
  }
}

/* dlsym into a function pointer without a cast between object and function pointers. */
#define LOAD_SYM(dst, handle, symname)                                                       \
  do {                                                                                       \
    void *sym_ = dlsym((handle), (symname));                                                 \
    memcpy(&(dst), &sym_, sizeof(dst));                                                      \
  } while (0)

/* ---------------------------------------------------------------- libraries */

static const char *dnnl_isa_name(int isa) {
  switch (isa) {
  case 0x0: return "all";
  case 0x1: return "sse41";
  case 0x3: return "avx";
  case 0x7: return "avx2";
  case 0xf: return "avx512_mic";
  case 0x1f: return "avx512_mic_4ops";
  case 0x27: return "avx512_core";
  case 0x67: return "avx512_core_vnni";
  case 0xe7: return "avx512_core_bf16";
  case 0x3e7: return "avx512_core_amx";
  case 0x407: return "avx2_vnni";
  default: return "unknown";
  }
}

static int load_lib(blas_lib *l) {
  l->handle = dlopen(l->soname, RTLD_NOW | RTLD_LOCAL);
  if (!l->handle) {
    const char *err = dlerror();
    printf("%-8s: not loaded (%s), skipping\n", l->name, err ? err : "dlopen failed");
    return 0;
  }
  const char *missing = NULL;
  switch (l->kind) {
  case LIB_OPENBLAS: {
    LOAD_SYM(l->cblas_sgemm, l->handle, "cblas_sgemm");
    LOAD_SYM(l->openblas_set_num_threads, l->handle, "openblas_set_num_threads");
    LOAD_SYM(l->openblas_get_num_threads, l->handle, "openblas_get_num_threads");
    if (!l->cblas_sgemm) missing = "cblas_sgemm";
    else if (!l->openblas_set_num_threads) missing = "openblas_set_num_threads";
    char *(*get_config)(void) = NULL, *(*get_core)(void) = NULL;
    LOAD_SYM(get_config, l->handle, "openblas_get_config");
    LOAD_SYM(get_core, l->handle, "openblas_get_corename");
    snprintf(l->info, sizeof l->info, "%s, core %s", get_config ? get_config() : "?",
             get_core ? get_core() : "?");
    break;
  }
  case LIB_BLIS: {
    LOAD_SYM(l->cblas_sgemm, l->handle, "cblas_sgemm");
    LOAD_SYM(l->bli_thread_set_num_threads, l->handle, "bli_thread_set_num_threads");
    LOAD_SYM(l->bli_thread_get_num_threads, l->handle, "bli_thread_get_num_threads");
    if (!l->cblas_sgemm) missing = "cblas_sgemm";
    else if (!l->bli_thread_set_num_threads) missing = "bli_thread_set_num_threads";
    char *(*version)(void) = NULL, *(*arch_string)(int) = NULL;
    int (*arch_id)(void) = NULL;
    LOAD_SYM(version, l->handle, "bli_info_get_version_str");
    LOAD_SYM(arch_id, l->handle, "bli_arch_query_id");
    LOAD_SYM(arch_string, l->handle, "bli_arch_string");
    snprintf(l->info, sizeof l->info, "BLIS %s, arch %s", version ? version() : "?",
             (arch_id && arch_string) ? arch_string(arch_id()) : "?");
    break;
  }
  case LIB_DNNL: {
    LOAD_SYM(l->dnnl_sgemm, l->handle, "dnnl_sgemm");
    /* oneDNN threads with OpenMP: control it through libgomp's ICV. */
    void *gomp = dlopen("libgomp.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    void *from = gomp ? gomp : l->handle; /* dlsym on a handle also searches its deps */
    LOAD_SYM(l->omp_set_num_threads, from, "omp_set_num_threads");
    LOAD_SYM(l->omp_get_max_threads, from, "omp_get_max_threads");
    if (gomp) dlclose(gomp); /* drops only the extra reference */
    if (!l->dnnl_sgemm) missing = "dnnl_sgemm";
    else if (!l->omp_set_num_threads) missing = "omp_set_num_threads";
    const dnnl_version_info *(*version)(void) = NULL;
    int (*isa)(void) = NULL;
    LOAD_SYM(version, l->handle, "dnnl_version");
    LOAD_SYM(isa, l->handle, "dnnl_get_effective_cpu_isa");
    const dnnl_version_info *v = version ? version() : NULL;
    if (v)
      snprintf(l->info, sizeof l->info, "oneDNN %d.%d.%d (%s), ISA %s", v->major, v->minor,
               v->patch, v->hash ? v->hash : "?", isa ? dnnl_isa_name(isa()) : "?");
    else
      snprintf(l->info, sizeof l->info, "oneDNN ?");
    break;
  }
  default:
    break;
  }
  if (missing) {
    printf("%-8s: loaded %s but symbol %s is missing, skipping\n", l->name, l->soname, missing);
    return 0;
  }
  l->loaded = 1;
  printf("%-8s: %s: %s\n", l->name, l->soname, l->info);
  return 1;
}

static void set_threads(blas_lib *l, int n) {
  switch (l->kind) {
  case LIB_OPENBLAS: l->openblas_set_num_threads(n); break;
  case LIB_BLIS: l->bli_thread_set_num_threads((int64_t)n); break;
  case LIB_DNNL: l->omp_set_num_threads(n); break;
  default: break;
  }
}

/* What the library says its thread setting is now, or -1 when it cannot say. */
static int get_threads(const blas_lib *l) {
  switch (l->kind) {
  case LIB_OPENBLAS:
    return l->openblas_get_num_threads ? l->openblas_get_num_threads() : -1;
  case LIB_BLIS:
    return l->bli_thread_get_num_threads ? (int)l->bli_thread_get_num_threads() : -1;
  case LIB_DNNL: return l->omp_get_max_threads ? l->omp_get_max_threads() : -1;
  default: return -1;
  }
}

/* C = A * B^T, A [m,k], B [n,k], C [m,n], all row major. Returns 0 on success. */
static int run_gemm(const blas_lib *l, int m, int n, int k, const float *a, const float *b,
                    float *c) {
  if (l->kind == LIB_DNNL)
    return l->dnnl_sgemm('N', 'T', m, n, k, 1.0f, a, k, b, k, 0.0f, c, n);
  l->cblas_sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS, m, n, k, 1.0f, a, k, b, k, 0.0f,
                 c, n);
  return 0;
}

/* ---------------------------------------------------------------- measurement */

static int measure(const blas_lib *l, const shape_t *s, const float *a, const float *b,
                   float *c, double min_time, result_t *r) {
  size_t cn = (size_t)s->m * (size_t)s->n;
  for (size_t i = 0; i < cn; i++) c[i] = NAN; /* beta=0: every element must be written */

  double t0 = wall_now();
  int status;
  do {
    status = run_gemm(l, s->m, s->n, s->k, a, b, c);
    if (status != 0) {
      printf("  %s: sgemm %dx%dx%d returned status %d\n", l->name, s->m, s->n, s->k, status);
      r->failed = 1;
      return -1;
    }
  } while (wall_now() - t0 < WARMUP_SECONDS);

  size_t cap = 64, n = 0;
  double *times = malloc(cap * sizeof *times);
  if (!times) return -1;
  double w0 = wall_now(), c0 = cpu_now();
  for (;;) {
    double t = wall_now();
    status = run_gemm(l, s->m, s->n, s->k, a, b, c);
    t = wall_now() - t;
    if (status != 0) {
      printf("  %s: sgemm %dx%dx%d returned status %d\n", l->name, s->m, s->n, s->k, status);
      free(times);
      r->failed = 1;
      return -1;
    }
    if (n == cap) {
      double *grown = realloc(times, 2 * cap * sizeof *times);
      if (!grown) break;
      times = grown;
      cap *= 2;
    }
    times[n++] = t;
    if (n >= 3 && wall_now() - w0 >= min_time) break;
  }
  double wall = wall_now() - w0, cpu = cpu_now() - c0;
  qsort(times, n, sizeof *times, cmp_double);
  r->ran = 1;
  r->reps = (int)n;
  r->best_s = times[0];
  r->median_s = (n % 2) ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
  r->cpu_ratio = wall > 0 ? cpu / wall : 0;
  free(times);
  return 0;
}

/* max |c - ref| / max |ref|; +inf when c holds a non-finite value. */
static double rel_diff(const float *c, const float *ref, size_t n) {
  double maxdiff = 0, maxref = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(c[i])) return INFINITY;
    double d = fabs((double)c[i] - (double)ref[i]);
    double v = fabs((double)ref[i]);
    if (d > maxdiff) maxdiff = d;
    if (v > maxref) maxref = v;
  }
  return maxref > 0 ? maxdiff / maxref : maxdiff;
}

static double gflops(const shape_t *s, double seconds) {
  return 2.0 * (double)s->m * (double)s->n * (double)s->k / seconds * 1e-9;
}

static void memcpy_bandwidth(void) {
  unsigned char *src = alloc_aligned(MEMCPY_BYTES), *dst = alloc_aligned(MEMCPY_BYTES);
  if (!src || !dst) {
    printf("memcpy : could not allocate 2 x 256 MiB, skipped\n");
    free(src);
    free(dst);
    return;
  }
  memset(src, 1, MEMCPY_BYTES); /* fault every page in before timing */
  memset(dst, 2, MEMCPY_BYTES);
  volatile unsigned char sink = 0;
  double best = INFINITY;
  for (int i = 0; i < 5; i++) {
    src[(size_t)i * 4096] = (unsigned char)i;
    double t = wall_now();
    memcpy(dst, src, MEMCPY_BYTES);
    t = wall_now() - t;
    sink = (unsigned char)(sink + dst[(size_t)i * 4096]);
    if (t < best) best = t;
  }
  (void)sink;
  printf("memcpy : %.1f GB/s (bytes copied / time, 256 MiB buffer, one thread, best of 5; "
         "DRAM traffic is at least twice that: read + write)\n",
         (double)MEMCPY_BYTES / best * 1e-9);
  free(src);
  free(dst);
}

static void cpu_model(char *buf, size_t len) {
  snprintf(buf, len, "?");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10) == 0) {
      char *p = strchr(line, ':');
      if (p) {
        p++;
        while (*p == ' ' || *p == '\t') p++;
        p[strcspn(p, "\n")] = '\0';
        snprintf(buf, len, "%s", p);
      }
      break;
    }
  }
  fclose(f);
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: bench_blas [--quick] [--threads N] [--help]\n"
          "  Times row-major fp32 C = A * B^T on moed's expert GEMM shapes with OpenBLAS,\n"
          "  BLIS and oneDNN (each loaded with dlopen) and prints GFLOP/s per library.\n"
          "  --quick      fewer shapes (M in {64,512} and the router gate), 0.1 s per point\n"
          "  --threads N  run with N threads only (default: 1 and 2)\n"
          "  --help       this text\n"
          "  Columns: best / median GFLOP/s over the timed repetitions, and cpu = process\n"
          "  CPU time / wall time of the timed loop (about the number of busy cores).\n"
          "  check = max over libraries of max|C - C_ref| / max|C_ref|, C_ref from the\n"
          "  first library; must be < %.0e. Exit status 1 when a check fails.\n",
          CHECK_TOL);
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv) {
  int quick = 0, only_threads = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) {
      quick = 1;
    } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      char *end = NULL;
      long v = strtol(argv[++i], &end, 10);
      if (!end || *end != '\0' || v < 1 || v > 1024) {
        fprintf(stderr, "bench_blas: bad thread count '%s'\n", argv[i]);
        return 2;
      }
      only_threads = (int)v;
    } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "bench_blas: unknown argument '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  setvbuf(stdout, NULL, _IOLBF, 0);

  const int H = 1024, F = 3584;
  const int mixtral_h = 4096, mixtral_f = 14336, mixtral_m = 128;
  static const int full_ms[] = {64, 128, 256, 512, 1024, 2048};
  static const int quick_ms[] = {64, 512};
  const int *ms = quick ? quick_ms : full_ms;
  int nms = quick ? 2 : 6;

  shape_t shapes[32];
  int nshapes = 0;
  for (int i = 0; i < nms; i++)
    shapes[nshapes++] = (shape_t){"up+gate", ms[i], 2 * F, H, 1};
  for (int i = 0; i < nms; i++) shapes[nshapes++] = (shape_t){"down", ms[i], H, F, 1};
  shapes[nshapes++] = (shape_t){"router", 2048, 8, H, 0};
  if (!quick) {
    shapes[nshapes++] = (shape_t){"mixtral up+gate", mixtral_m, 2 * mixtral_f, mixtral_h, 0};
    shapes[nshapes++] = (shape_t){"mixtral down", mixtral_m, mixtral_h, mixtral_f, 0};
  }

  int threads[MAX_THREAD_SETTINGS], nthreads = 0;
  if (only_threads) {
    threads[nthreads++] = only_threads;
  } else {
    threads[nthreads++] = 1;
    threads[nthreads++] = 2;
  }
  double min_time = quick ? 0.1 : 0.3;

  char model[256];
  cpu_model(model, sizeof model);
  printf("bench_blas: fp32 C[M,N] = A[M,K] * B[N,K]^T, row major\n");
  printf("cpu    : %s, %ld online cores\n", model, sysconf(_SC_NPROCESSORS_ONLN));
  static const char *envs[] = {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "BLIS_NUM_THREADS",
                               "OMP_PROC_BIND", "GOMP_SPINCOUNT", "OMP_WAIT_POLICY"};
  for (size_t i = 0; i < sizeof envs / sizeof envs[0]; i++) {
    const char *v = getenv(envs[i]);
    if (v) printf("env    : %s=%s (thread counts are set explicitly anyway)\n", envs[i], v);
  }
  printf("timing : warm-up %.1f s, then >= %.1f s and >= 3 reps per point; %.1f s pause "
         "between points\n",
         WARMUP_SECONDS, min_time, SETTLE_SECONDS);
  memcpy_bandwidth();

  int nloaded = 0;
  for (int i = 0; i < NLIBS; i++) nloaded += load_lib(&libs[i]);
  if (nloaded == 0) {
    printf("no BLAS library could be loaded\n");
    return 1;
  }
  /* Confirm each library accepts the thread settings we will use. */
  for (int t = 0; t < nthreads; t++) {
    printf("threads: set %d ->", threads[t]);
    for (int i = 0; i < NLIBS; i++) {
      if (!libs[i].loaded) continue;
      set_threads(&libs[i], threads[t]);
      printf(" %s reports %d;", libs[i].name, get_threads(&libs[i]));
    }
    printf("\n");
  }

  static result_t results[32][MAX_THREAD_SETTINGS][NLIBS];
  memset(results, 0, sizeof results);
  int failures = 0;

  /* Table header. */
  printf("\nGFLOP/s (best, median); cpu = process CPU time / wall time of the timed loop (busy "
         "cores, spin-waiting included);\ncheck = worst max|dC|/max|C| vs the first library\n");
  printf("%-15s %5s %6s %6s %3s |", "", "", "", "", "");
  for (int i = 0; i < NLIBS; i++)
    if (libs[i].loaded) printf(" %-18s |", libs[i].name);
  printf("\n%-15s %5s %6s %6s %3s |", "shape", "M", "N", "K", "thr");
  for (int i = 0; i < NLIBS; i++)
    if (libs[i].loaded) printf(" %6s %6s %4s |", "best", "median", "cpu");
  printf(" %8s\n", "check");

  for (int si = 0; si < nshapes; si++) {
    const shape_t *s = &shapes[si];
    size_t an = (size_t)s->m * (size_t)s->k, bn = (size_t)s->n * (size_t)s->k;
    size_t cn = (size_t)s->m * (size_t)s->n;
    float *a = alloc_aligned(an * sizeof(float)), *b = alloc_aligned(bn * sizeof(float));
    float *c = alloc_aligned(cn * sizeof(float)), *ref = alloc_aligned(cn * sizeof(float));
    if (!a || !b || !c || !ref) {
      printf("%-15s %5d %6d %6d: out of memory, skipped\n", s->name, s->m, s->n, s->k);
      free(a);
      free(b);
      free(c);
      free(ref);
      continue;
    }
    fill_random(a, an, 12345u + (uint32_t)si);
    fill_random(b, bn, 67890u + (uint32_t)si);

    for (int t = 0; t < nthreads; t++) {
      int have_ref = 0, ref_lib = -1;
      double worst = 0;
      for (int li = 0; li < NLIBS; li++) {
        blas_lib *l = &libs[li];
        result_t *r = &results[si][t][li];
        if (!l->loaded) continue;
        set_threads(l, threads[t]);
        sleep_seconds(SETTLE_SECONDS);
        if (measure(l, s, a, b, c, min_time, r) != 0) {
          failures++;
          continue;
        }
        if (!have_ref) {
          /* The reference must at least be fully written and finite. */
          int finite = 1;
          for (size_t i = 0; i < cn && finite; i++) finite = isfinite(c[i]);
          memcpy(ref, c, cn * sizeof(float));
          have_ref = 1;
          ref_lib = li;
          r->is_ref = 1;
          r->rel_diff = finite ? 0 : INFINITY;
        } else {
          r->rel_diff = rel_diff(c, ref, cn);
        }
        r->check_ok = r->rel_diff < CHECK_TOL;
        if (!r->check_ok) failures++;
        if (r->rel_diff > worst) worst = r->rel_diff;
      }

      printf("%-15s %5d %6d %6d %3d |", s->name, s->m, s->n, s->k, threads[t]);
      for (int li = 0; li < NLIBS; li++) {
        const result_t *r = &results[si][t][li];
        if (!libs[li].loaded) continue;
        if (!r->ran)
          printf(" %6s %6s %4s |", "error", "", "");
        else
          printf(" %6.1f %6.1f %4.2f |", gflops(s, r->best_s), gflops(s, r->median_s),
                 r->cpu_ratio);
      }
      printf(" %8.1e%s\n", worst, worst < CHECK_TOL ? "" : " FAIL");
      for (int li = 0; li < NLIBS; li++) {
        const result_t *r = &results[si][t][li];
        if (r->ran && !r->check_ok)
          printf("  CHECK FAILED: %s %s: max|dC|/max|C| = %.3e (reference: %s)\n",
                 libs[li].name, r->is_ref ? "has non-finite output" : "differs", r->rel_diff,
                 ref_lib >= 0 ? libs[ref_lib].name : "?");
      }
    }
    free(a);
    free(b);
    free(c);
    free(ref);
  }

  /* Winner per shape, by best GFLOP/s. */
  printf("\nwinner per shape (by best GFLOP/s; margin = winner / runner-up - 1)\n");
  printf("%-15s %5s %6s %6s %3s | %-8s %7s | %-8s %7s | %7s\n", "shape", "M", "N", "K", "thr",
         "winner", "GFLOP/s", "2nd", "GFLOP/s", "margin");
  for (int si = 0; si < nshapes; si++) {
    const shape_t *s = &shapes[si];
    for (int t = 0; t < nthreads; t++) {
      int w = -1, second = -1;
      for (int li = 0; li < NLIBS; li++) {
        const result_t *r = &results[si][t][li];
        if (!r->ran || !r->check_ok) continue;
        if (w < 0 || r->best_s < results[si][t][w].best_s) {
          second = w;
          w = li;
        } else if (second < 0 || r->best_s < results[si][t][second].best_s) {
          second = li;
        }
      }
      if (w < 0) continue;
      printf("%-15s %5d %6d %6d %3d | %-8s %7.1f |", s->name, s->m, s->n, s->k, threads[t],
             libs[w].name, gflops(s, results[si][t][w].best_s));
      if (second >= 0)
        printf(" %-8s %7.1f | %6.1f%%\n", libs[second].name,
               gflops(s, results[si][t][second].best_s),
               100.0 * (results[si][t][second].best_s / results[si][t][w].best_s - 1.0));
      else
        printf(" %-8s %7s | %7s\n", "-", "-", "-");
    }
  }

  /* Expert shapes overall: geometric mean of best GFLOP/s, and the sum of the best times
   * (one up+gate plus one down at every M). */
  printf("\nexpert shapes (up+gate and down, all M): geometric mean of best GFLOP/s, and the "
         "sum of the best times\n");
  for (int t = 0; t < nthreads; t++) {
    printf("thr %d:", threads[t]);
    for (int li = 0; li < NLIBS; li++) {
      if (!libs[li].loaded) continue;
      double logsum = 0, total = 0;
      int n = 0, complete = 1;
      for (int si = 0; si < nshapes; si++) {
        if (!shapes[si].expert) continue;
        const result_t *r = &results[si][t][li];
        if (!r->ran || !r->check_ok) {
          complete = 0;
          continue;
        }
        logsum += log(gflops(&shapes[si], r->best_s));
        total += r->best_s;
        n++;
      }
      if (n && complete)
        printf("  %s %.1f GFLOP/s, %.1f ms;", libs[li].name, exp(logsum / n), 1e3 * total);
      else
        printf("  %s incomplete;", libs[li].name);
    }
    printf("\n");
  }

  if (failures) printf("\n%d measurement(s) failed or disagreed with the reference\n", failures);
  /* No dlclose: unloading libraries whose OpenMP / pthread pools are alive is asking for
   * trouble at exit, and the process ends here anyway. */
  return failures ? 1 : 0;
}
