#!/usr/bin/env bash
# scale.sh TEST_LIVE: /metrics for 256 experts x 16 layers on 32 ranks (test_live renders
# it from a full view) is valid Prometheus text by prometheus_client's parser and <= 2 MB;
# moed_routing_info's escaped labels (a replayed trace's path) read back as written.
set -euo pipefail
PYTHON=${MOED_PYTHON:-$( [[ -x /usr/bin/python3 ]] && echo /usr/bin/python3 || command -v python3)}
"$PYTHON" -c 'import prometheus_client' 2>/dev/null || \
  { echo "SKIP: python3-prometheus-client not installed"; exit 77; }
out=$(mktemp "${TMPDIR:-/tmp}/moed-scale.XXXXXX")
trap 'rm -f "$out"' EXIT
"$1" --dump "$out"
timeout 60 "$PYTHON" - "$out" <<'PY'
import os, sys
from prometheus_client.parser import text_string_to_metric_families
text = open(sys.argv[1]).read()
assert len(text) <= 2 << 20, len(text)
fams = {f.name: f for f in text_string_to_metric_families(text)}
n = sum(len(f.samples) for f in fams.values())
tok = [s for s in fams["moed_expert_tokens"].samples if s.name == "moed_expert_tokens_total"]
assert len(tok) == 256 * 16, len(tok)
assert "expert" not in fams["moed_expert_seconds"].samples[0].labels   # per layer at this size
# rank 0's latency summaries: one per layer (NaN before any sample) and the step's
assert fams["moed_layer_latency_seconds"].type == "summary", fams["moed_layer_latency_seconds"].type
lq = [s for s in fams["moed_layer_latency_seconds"].samples if "quantile" in s.labels]
assert len(lq) == 16 * 3 and {s.labels["quantile"] for s in lq} == {"0.5", "0.9", "0.99"}, len(lq)
assert fams["moed_step_latency_seconds"].type == "summary"
# where the expert choices come from: one info sample, its escaped labels read back whole
info = fams["moed_routing_info"].samples
assert len(info) == 1 and info[0].value == 1, info
assert info[0].labels == {"source": "replayed", "file": '/data/a "q" \\b\nc.safetensors',
                          "trace_source": "vLLM routed_experts"}, info[0].labels
print("scale ok: %d bytes, %d families, %d samples" % (len(text), len(fams), n))
PY
