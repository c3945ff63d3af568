# speedup.awk: bench_decode.sh's speed-up lines from its runs.txt (one line a run: DTYPE
# COPIES TOKENS EXPERTS TOPK MEAN_STEP_MS READ_GBPS ROUND MEDIAN_STEP_MS READ_BEFORE
# READ_AFTER EXPERT_GBPS), run as `awk -v rounds=N -f speedup.awk runs.txt`. For each held
# type and its widened baseline (fp8 / fp8-bf16, mxfp4 / mxfp4-bf16) run back to back: the
# widened run's step over the held one's, by the mean step (every step, a stall of the
# host's included) and by the median step (trace.json, exact), round by round with both
# runs' reads before and after, their median over the rounds, and over the rounds with steady
# reads: the four reads within 20% of each other, and neither run reading its weights
# (expert GB/s) faster than the higher of its reads. This host's memory moves between ~35
# and ~65 GB/s: a pair that met both speeds says little; a run that met a slower spell than
# both its reads is not caught.
{ key = $2 " " $3 " " $4 " " $5; step[$1, key, $8, 1] = $6; step[$1, key, $8, 2] = $9
  rb[$1, key, $8] = $10; ra[$1, key, $8] = $11; fast[$1, key, $8] = ($12 > $7)
  if (!(key in seen)) { seen[key] = 1; keys[++nk] = key } }
function med(a, n,   p, q, t) {
  for (p = 1; p <= n; p++) for (q = p + 1; q <= n; q++) if (a[q] < a[p]) { t = a[p]; a[p] = a[q]; a[q] = t }
  return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
END {
  split("fp8 mxfp4", base, " "); split("mean median", how, " ")
  for (b = 1; b <= 2; b++) for (i = 1; i <= nk; i++) for (h = 1; h <= 2; h++) {
    key = keys[i]; w = base[b] "-bf16"; n = 0; m = 0; list = ""
    for (r = 1; r <= rounds; r++) {
      if (!((base[b], key, r, h) in step) || !((w, key, r, h) in step) || step[base[b], key, r, h] <= 0 ||
          step[w, key, r, h] <= 0) continue
      x = step[w, key, r, h] / step[base[b], key, r, h]; v[++n] = x
      lo = hi = rb[w, key, r]
      split(ra[w, key, r] " " rb[base[b], key, r] " " ra[base[b], key, r], rr, " ")
      for (q = 1; q <= 3; q++) { lo = rr[q] < lo ? rr[q] : lo; hi = rr[q] > hi ? rr[q] : hi }
      quick = fast[w, key, r] || fast[base[b], key, r]
      agree = hi > 0 && lo >= 0.8 * hi
      steady = agree && !quick
      if (steady) sv[++m] = x
      list = list sprintf("%sround %d %.2fx (%s / %s ms, read %s-%s / %s-%s GB/s%s)", n > 1 ? ", " : "",
                          r, x, step[w, key, r, h], step[base[b], key, r, h], rb[w, key, r],
                          ra[w, key, r], rb[base[b], key, r], ra[base[b], key, r],
                          agree ? (quick ? ", read faster than the reads" : "") : ", reads unsteady")
    }
    if (n == 0) continue
    if (!hdr++) print "speed-up: the widened run's step over the held one's, run back to back, by the mean step and by the median step"
    split(key, kk, " ")
    lo = hi = v[1]; for (q = 2; q <= n; q++) { lo = v[q] < lo ? v[q] : lo; hi = v[q] > hi ? v[q] : hi }
    all = sprintf("median %.2fx of %d of %d rounds (%.2f-%.2fx), ", med(v, n), n, rounds, lo, hi)
    all = all (m > 0 ? sprintf("%.2fx of the %d with steady reads: ", med(sv, m), m) : "none with steady reads: ")
    printf("  %s over %s, %s tokens, %s:%s, %s, %s step: %s%s\n", base[b], w, kk[2], kk[3], kk[4],
           kk[1], how[h], all, list)
  }
}
