"""Checks of the live page's DOM as headless Chromium dumped it (tests/live/live.sh).

  page_check.py marks DOM          the four charts drew, with data (2 layers x 8 experts,
                                   3 ranks), and every label, unit and colour scale is there
  page_check.py values DOM ST LJ   every figure shown (hover titles, labels, scales, the
                                   ranks table, the header) equals /status ST and /live.json
                                   LJ, the very files the page was served
  page_check.py window DOM ST      the window's state in words, as /status ST says it
"""
import html
import json
import re
import sys


def load(path):
    dom = open(path).read()
    # the page's text as a reader sees it: style and script dropped, inline tags (b, sup)
    # joined to their words, the others a space, entities decoded, spaces collapsed
    body = re.sub(r"<(style|script)>.*?</\1>", " ", dom, flags=re.S)
    body = re.sub(r"</?(b|sup)>", "", body)
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split())
    return dom, text


def titles(dom):
    return [html.unescape(t) for t in re.findall(r"<title>([^<]*)</title>", dom)]


def chart(dom, cid):
    """The markup inside one chart's element (its svg)."""
    m = re.search(r'<div id="%s"[^>]*>(.*?)</div>' % cid, dom, re.S)
    assert m, "no chart " + cid
    return m.group(1)


def texts(part, cls=None):
    pat = r'<text[^>]*%s>([^<]*)</text>' % ('class="%s"' % cls if cls else "")
    return [html.unescape(t) for t in re.findall(pat, part)]


def near(shown, want, half):
    """A figure printed with some decimals: equal to the source within half a last digit."""
    return abs(float(shown) - want) <= half * (1 + 1e-9) + 1e-12


def compact_ok(shown, v):
    """report.html's short numbers (987, 12.3k, 4.5M, 1.2G) against the value."""
    for suf, mul in (("k", 1e3), ("M", 1e6), ("G", 1e9)):
        if shown.endswith(suf):
            return near(shown[:-1], v / mul, 0.05)
    dec = len(shown.split(".")[1]) if "." in shown else 0
    return near(shown, v, 0.5 * 10 ** -dec)


def marks(dom, text):
    n = {}
    for tag in re.findall(r"<div[^>]*>", dom):
        i, k = re.search(r'id="(\w+)"', tag), re.search(r'data-n="(\d+)"', tag)
        if i and k and 'data-drawn="1"' in tag:
            n[i.group(1)] = int(k.group(1))
    print("chart marks with data:", n)
    # 2 layers x 8 experts: every cell routed something; 3 ranks: 3 memory bars; step points:
    # >= 2. Bytes: the page colours each pair's bytes since its previous refresh, and under
    # Chromium's virtual time two refreshes can be milliseconds apart in real time, so a rank
    # whose counters did not move between them colours no cell (CI saw 2 of 4 twice): at
    # least one coloured cell, and every one of the 4 pairs (rank 0 with ranks 1 and 2, both
    # ways) with its bytes since the start in its title (the replayed check compares those).
    assert n.get("heat", 0) == 16, n
    assert n.get("mem", 0) == 3, n
    assert n.get("bytes", 0) >= 1, n
    assert n.get("steps", 0) >= 2, n
    pairs = [m for m in (re.search(r"rank (\d+) to rank (\d+): .*?(\d+) bytes since the start", t)
                         for t in titles(chart(dom, "bytes"))) if m and int(m.group(3)) > 0]
    assert len(pairs) >= 4, [m.group(0) for m in pairs]
    assert "tokens/s" in text, "no header figures"
    heat, steps, byts, mem = (chart(dom, c) for c in ("heat", "steps", "bytes", "mem"))
    # axes and their units
    want = {"heat": (heat, ["layer 0", "layer 1", "expert", "imbalance (~10 s)"] +
                     [str(e) for e in range(8)]),
            "steps": (steps, ["ms per step", "step (rank 0's step number)"]),
            "bytes": (byts, ["from rank (src)", "to rank (dst)", "rank 0", "rank 1", "rank 2"]),
            "mem": (mem, ["MiB resident", "rank 0", "rank 1", "rank 2", "0"])}
    for cid, (part, labels) in want.items():
        have = texts(part)
        for lab in labels:
            assert lab in have, (cid, lab, have[:40])
    # value axes: numbered ticks starting at 0
    for cid, part in (("steps", steps), ("mem", mem)):
        ticks = [t for t in texts(part) if re.fullmatch(r"\d+(\.\d+)?", t)]
        assert len(ticks) >= 3 and float(ticks[0]) == 0, (cid, ticks)
    # colour scales: 0, a number at the top, and their unit
    for cid, part, unit in (("heat", heat, r"^tokens (in the last [\d.]+ s|since the start)"),
                            ("bytes", byts, r"^(bytes|kB|MB|GB) (in the last [\d.]+ s|since)")):
        sc = texts(part, "scale")
        assert len(sc) == 2 and sc[0] == "0" and re.fullmatch(r"[\d.]+[kMG]?", sc[1]), (cid, sc)
        assert any(re.match(unit, u) for u in texts(part, "unit")), (cid, texts(part, "unit"))
        assert "linearGradient" in part, cid
    # hover titles on every cell, point and bar
    assert len(titles(heat)) == 2 * 8 + 2, titles(heat)       # cells and the 2 imbalances
    assert len(titles(byts)) == 9 and len(titles(mem)) == 3
    assert len(titles(steps)) == n["steps"]
    # the ranks table and the window in words
    assert re.search(r"rank alive last step last heard \(s ago\) resident \(MiB\)", text), text
    assert "no profiling window is recording" in text, text
    print("labels, units, scales and titles present")


def values(dom, text, st, d):
    L, E, W = d["layers"], d["experts"], d["world"]
    heat, steps, byts, mem = (chart(dom, c) for c in ("heat", "steps", "bytes", "mem"))
    # heat map: one title per (layer, expert) with its tokens since the start and its ranks;
    # a replay serves the same data at every refresh, so the cells show those totals
    cells = {}
    for t in titles(heat):
        m = re.fullmatch(r"layer (\d+), expert (\d+)(?: on ranks? ([\d, ]+))?: (\d+) tokens "
                         r"since the start; (?:([\d.]+)x the layer mean|(none in the layer, "
                         r"no mean to compare with))", t)
        if m:
            cells[int(m.group(1)), int(m.group(2))] = m
    assert len(cells) == L * E, (len(cells), titles(heat)[:3])
    mx = max(max(r) for r in d["tokens"])
    for (l, e), m in cells.items():
        v = d["tokens"][l][e]
        assert int(m.group(4)) == v, (l, e, m.group(0), v)
        hosts = [int(x) for x in (m.group(3) or "").replace(",", " ").split()]
        assert hosts == d["expert_ranks"][l][e], (l, e, hosts, d["expert_ranks"][l][e])
        mean = sum(d["tokens"][l]) / E
        # a layer with no token has no mean: its cells say so (they read 0.00x, 0/0)
        assert (m.group(5) and near(m.group(5), v / mean, 0.005) if mean > 0 else m.group(6)), \
            (m.group(0), v, mean)
    imb = [t for t in texts(heat, "imb")]
    assert len(imb) == L and all(near(imb[l][:-1], d["imbalance"][l], 0.005) for l in range(L)), \
        (imb, d["imbalance"])
    cell_txt = [t for t in texts(heat, "in")] + [t for t in texts(heat, "in dark")]
    assert len(cell_txt) == L * E, cell_txt
    assert compact_ok(texts(heat, "scale")[1], mx), (texts(heat, "scale"), mx)
    # step time: a point per step with its step number and ms
    pts = [re.fullmatch(r"step (\d+): ([\d.]+) ms", t) for t in titles(steps)]
    assert len(pts) == len(d["step_ms"]) > 0 and all(pts), titles(steps)[:3]
    for p, i, ms in zip(pts, d["step_index"], d["step_ms"]):
        assert int(p.group(1)) == i and near(p.group(2), ms, 0.0005), (p.group(0), i, ms)
    # bytes: each pair's bytes since the start; the diagonal is not counted
    seen = 0
    for t in titles(byts):
        m = re.fullmatch(r"rank (\d+) to rank (\d+): (\d+) bytes since the start", t)
        if m:
            s, k = int(m.group(1)), int(m.group(2))
            assert int(m.group(3)) == d["bytes"][s][k], (t, d["bytes"][s][k])
            seen += 1
        else:
            assert re.fullmatch(r"rank \d+ to itself: .*not counted", t), t
    assert seen == W * (W - 1), seen
    bmax = max(d["bytes"][s][k] for s in range(W) for k in range(W) if s != k)
    unit = texts(byts, "unit")[0].split()[0]
    div = {"bytes": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}[unit]
    assert compact_ok(texts(byts, "scale")[1], bmax / div), (texts(byts, "scale"), bmax, unit)
    # memory: each rank's bar with its exact bytes and MiB
    bars = [re.fullmatch(r"rank (\d+): ([\d.]+) MiB resident \((\d+) bytes\)", t)
            for t in titles(mem)]
    assert len(bars) == W and all(bars), titles(mem)
    for r, b in enumerate(bars):
        v = d["resident"][r]
        assert int(b.group(1)) == r and int(b.group(3)) == v, (b.group(0), v)
        assert near(b.group(2), v / 1048576, 0.05), (b.group(0), v)
    # the ranks table and the header: /status
    rows = re.findall(r"<tr>((?:<td[^>]*>.*?</td>){5})</tr>", dom)
    assert len(rows) == W, rows
    for row, r in zip(rows, st["ranks"]):
        c = [html.unescape(re.sub(r"<[^>]+>", "", x)) for x in re.findall(r"<td[^>]*>(.*?)</td>",
                                                                          row)]
        assert int(c[0]) == r["rank"] and c[1] == ("yes" if r["alive"] else "no"), (c, r)
        assert int(c[2]) == r["last_step"], (c, r)
        assert near(c[3], r["seconds_since_heard"], 0.05), (c, r)
        assert near(c[4], r["resident_bytes"] / 1048576, 0.05), (c, r)
    m = re.search(r"(Running|Run ended): step (\d+), (\d+) tokens/s over the last ~5 s, "
                  r"(\d+) of (\d+) ranks alive", text)
    assert m, text[:300]
    assert int(m.group(2)) == st["step"] and abs(int(m.group(3)) - st["tokens_per_s"]) <= 0.5
    assert int(m.group(4)) == sum(r["alive"] for r in st["ranks"]) and int(m.group(5)) == W
    print("values equal /status and /live.json: %d cells, %d steps, %d byte cells, %d bars"
          % (len(cells), len(pts), seen, len(bars)))


def window(text, st):
    w, rep = st["window"], st["reports"]
    span = "(steps %s to %s)" % (w.get("first_step"), w.get("last_step"))
    ns = "%s step%s" % (w.get("steps"), "" if w.get("steps") == 1 else "s")
    into = "into folder %s" % w.get("folder")
    if w["state"] == "idle":
        want = "Idle: no profiling window is recording."
    elif w["state"] == "requested":
        want = "Window %d requested: %s %s; it opens at a step boundary soon." % (
            w["id"], ns, into)
    elif w["state"] == "open" and st["step"] < w["first_step"]:
        want = "Window %d agreed: %s %s %s, starting in %d steps." % (
            w["id"], ns, span, into, w["first_step"] - st["step"])
    elif w["state"] == "open":
        k = min(w["steps"], st["step"] - w["first_step"] + 1)
        want = "Recording window %d: step %d of %d %s %s." % (w["id"], k, w["steps"], span,
                                                             into)
    elif w["state"] == "writing":
        want = "Window %d recorded its %s %s; writing the report %s." % (w["id"], ns, span,
                                                                        into)
    else:
        raise SystemExit("unknown state " + w["state"])
    assert want in text, (want, text)
    if rep:
        last = "Last window written to folder %s in %s" % (rep[-1], st["output_dir"])
        assert last in text, (last, text)
    else:
        assert "No window written yet." in text, text
    print("window in words:", want)


if __name__ == "__main__":
    mode, dom_path = sys.argv[1], sys.argv[2]
    dom, text = load(dom_path)
    if mode == "marks":
        marks(dom, text)
    elif mode == "values":
        values(dom, text, json.load(open(sys.argv[3])), json.load(open(sys.argv[4])))
    elif mode == "window":
        window(text, json.load(open(sys.argv[3])))
    else:
        raise SystemExit("unknown mode " + mode)
