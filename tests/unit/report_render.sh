#!/usr/bin/env bash
# report_render.sh TEST_REPORT_ROUTING: report.html of 256 experts x 60 layers (past the heat
# maps' bound: the hottest pairs' table and a strip per layer) as headless Chromium builds its
# DOM: every row and cell where the writer put it (a tag left open would move them), and
# each figure the one summary.json's counts give: the table's pairs most first by share of
# their layer, the strips' first expert each layer's hottest. 77 without Chromium.
set -euo pipefail
PYTHON=${MOED_PYTHON:-$( [[ -x /usr/bin/python3 ]] && echo /usr/bin/python3 || command -v python3)}
chrome=$(command -v chromium || command -v chromium-browser || true)
[[ -n "$chrome" ]] || { echo "SKIP: chromium not installed"; exit 77; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/moed-render.XXXXXX")
trap 'rm -rf "$dir"' EXIT
"$1" --demo "$dir" >/dev/null
# as root in a container Chromium needs --no-sandbox; its profile here, not in ~/.cache
timeout 120 "$chrome" --headless --no-sandbox --disable-gpu --virtual-time-budget=2000 \
  --user-data-dir="$dir/chromium-profile" --dump-dom "file://$dir/wide/report.html" > "$dir/dom.html" 2> "$dir/chrome.err" ||
  { tail -5 "$dir/chrome.err"; echo "FAIL: chromium"; exit 1; }
timeout 120 "$PYTHON" - "$dir/dom.html" "$dir/wide/summary.json" <<'PY'
import json, sys
from html.parser import HTMLParser

class Tables(HTMLParser):
    """The rows of the tables with an id: each row a list of cells, each cell its text and
    its chips ([text of each span.chip])."""
    def __init__(self):
        super().__init__()
        self.tables, self.cur, self.row, self.cell, self.chip = {}, None, None, None, None
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table" and a.get("id"):
            self.cur = self.tables.setdefault(a["id"], [])
        elif tag == "tr" and self.cur is not None:
            self.row = []
            self.cur.append(self.row)
        elif tag in ("td", "th") and self.row is not None:
            self.cell = {"text": "", "chips": []}
            self.row.append(self.cell)
        elif tag == "span" and self.cell is not None and "chip" in a.get("class", ""):
            self.chip = ""
    def handle_endtag(self, tag):
        if tag == "table":
            self.cur = None
        elif tag == "tr":
            self.row = None
        elif tag in ("td", "th"):
            self.cell = None
        elif tag == "span" and self.chip is not None:
            self.cell["chips"].append(self.chip.strip())
            self.chip = None
    def handle_data(self, d):
        if self.cell is not None:
            self.cell["text"] += d
        if self.chip is not None:
            self.chip += d

p = Tables()
p.feed(open(sys.argv[1]).read())
s = json.load(open(sys.argv[2]))
layers = s["layers"]
E = s["run"]["num_experts"]
assert len(layers) == 60 and E == 256, (len(layers), E)
top, strips = p.tables.get("hot-top"), p.tables.get("hot-layers")
assert top and strips, sorted(p.tables)
# the hottest pairs: 20 rows of 9 cells, most first, each figure from the counts
assert len(top) == 21 and all(len(r) == 9 for r in top), [len(r) for r in top]
prev = 1.0
for i, r in enumerate(top[1:]):
    c = [x["text"].strip() for x in r]
    l, e, d = int(c[1]), int(c[2]), int(c[4])
    dem = layers[l]["demand"]
    share = dem[e] / sum(dem)
    assert int(c[0]) == i + 1 and d == dem[e], (i, c)
    assert c[7] == "%.2f%%" % (100 * share) and c[8] == "%.2f" % (share * E), (i, c, share)
    assert share <= prev, (i, share, prev)
    prev = share
    # nothing hotter was left out: the 20th share is at least every pair not listed
listed = {(int(r[1]["text"]), int(r[2]["text"])) for r in top[1:]}
rest = max(layers[l]["demand"][e] / sum(layers[l]["demand"])
           for l in range(60) for e in range(E) if (l, e) not in listed)
assert rest <= prev, (rest, prev)
# the strips: a row per layer, 8 chips, the first the layer's hottest with its share
assert len(strips) == 61 and all(len(r) == 6 for r in strips), len(strips)
for l, r in enumerate(strips[1:]):
    dem = layers[l]["demand"]
    chips = r[5]["chips"]
    hot = max(range(E), key=lambda e: (dem[e], -e))
    assert int(r[0]["text"]) == l and int(r[1]["text"]) == sum(dem), (l, r[0], r[1])
    assert len(chips) == 8, (l, chips)
    assert chips[0] == "%d %.1f%%" % (hot, 100 * dem[hot] / sum(dem)), (l, chips[0], hot)
    assert hot == layers[l]["routing"]["hottest_expert"], l
    assert r[2]["text"] == "%.2f" % (dem[hot] * E / sum(dem)), (l, r[2])
print("report.html in Chromium: 20 hottest pairs, 60 layer strips, figures match summary.json")
PY
