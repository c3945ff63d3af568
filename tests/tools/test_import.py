#!/usr/bin/env python3
"""test_import.py CASE: profiler/tools/moed-routing-import and moed_routing.py (ctest
tools.*, tests/tools/run.sh). Each engine's record is built in the engine's own layout
(tests/tools/layouts.py, citing their code) from known choices; the trace read back must hold
exactly those. Exit 0 pass, 1 fail, 77 skip (torch or transformers missing)."""

import base64
import json
import os
import pickle
import struct
import subprocess
import sys
import tempfile
import zipfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TOOLS = os.path.join(ROOT, "profiler", "tools")
CLI = os.path.join(TOOLS, "moed-routing-import")
FIXTURE = os.path.join(HERE, "data", "expert_distribution_recorder_1700000000.0_0.pt")
sys.path.insert(0, TOOLS)
sys.path.insert(0, HERE)

import layouts  # noqa: E402
import moed_routing as mr  # noqa: E402
import moed_routing_sources as srcs  # noqa: E402

FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print(f"FAIL: {what}")


def skip(reason):
    print(f"SKIP: {reason}")
    sys.exit(77)


def cli(*args):
    p = subprocess.run([sys.executable, CLI] + [str(a) for a in args], capture_output=True,
                       text=True, timeout=600)
    return p.returncode, p.stdout + p.stderr


def ok(*args):
    rc, out = cli(*args)
    check(rc == 0, f"moed-routing-import {' '.join(map(str, args))}: rc {rc}: {out.strip()}")
    return out


def refused(args, *words):
    rc, out = cli(*args)
    check(rc == 1, f"{' '.join(map(str, args))}: rc {rc} (want 1): {out.strip()}")
    for w in words:
        check(w in out, f"{' '.join(map(str, args))}: the message does not say {w!r}: "
                        f"{out.strip()}")
    check(out.count("\n") <= 2, f"{' '.join(map(str, args))}: more than one line: {out}")


def same_trace(t, truth, layers, num_experts, top_k, what, uniform=True, weights=None):
    """The trace holds exactly truth[:, L, :] for each layer L, 1/k weights (or weights)."""
    check(t.layer_ids == list(layers), f"{what}: layers {t.layer_ids}, want {list(layers)}")
    check(t.num_experts == num_experts and t.top_k == top_k,
          f"{what}: {t.num_experts} experts top_k {t.top_k}, want {num_experts} {top_k}")
    check(t.uniform_weights == uniform, f"{what}: uniform_weights {t.uniform_weights}")
    for L in t.layer_ids:
        check(t.ids[L].dtype == np.int32 and np.array_equal(t.ids[L], truth[:, L, :]),
              f"{what}: layer {L} ids differ from the known choices")
        want = (np.full(t.ids[L].shape, np.float32(1) / np.float32(top_k), np.float32)
                if weights is None else weights[:, L, :].astype(np.float32))
        check(np.array_equal(t.weights[L], want), f"{what}: layer {L} weights differ")


# ------------------------------------------------------------------------------------------
def case_format(tmp):
    """moed_routing.py: write, read back exactly; every broken file refused with its reason."""
    rng = np.random.default_rng(7)
    ids = {L: np.stack([rng.choice(16, 4, replace=False) for _ in range(9)]).astype(np.int32)
           for L in (0, 3, 5)}
    w = {L: rng.random((9, 4)).astype(np.float32) for L in ids}
    t = mr.Trace([0, 3, 5], ids, w, 16, 4, 3, "qwen3_moe", "unit test")
    path = mr.write(tmp, t)  # a folder: tmp/routing.safetensors
    check(path == os.path.join(tmp, "routing.safetensors"), f"folder output went to {path}")
    check(not [f for f in os.listdir(tmp) if f.endswith(".tmp")], "a temporary file was left")
    back = mr.read(tmp)
    check(back.layer_ids == [0, 3, 5] and back.tokens_per_step == 3 and
          back.family == "qwen3_moe" and back.source == "unit test" and not back.uniform_weights,
          "metadata read back differs")
    for L in ids:
        check(np.array_equal(back.ids[L], ids[L]) and np.array_equal(back.weights[L], w[L]),
              f"layer {L} read back differs")
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    head = json.loads(raw[8:8 + n])
    check(n % 8 == 0 and head["__metadata__"]["format"] == "moed-routing/1" and
          head["__metadata__"]["layers"] == "[0, 3, 5]" and
          head["layers.3.topk_ids"]["dtype"] == "I32" and
          head["layers.3.topk_weights"]["shape"] == [9, 4],
          f"header not as specified: {head}")

    def broken(name, edit_header=None, edit_data=None):
        h = json.loads(raw[8:8 + n])
        data = bytearray(raw[8 + n:])
        if edit_header:
            edit_header(h)
        if edit_data:
            edit_data(h, data)
        hb = json.dumps(h).encode()
        hb += b" " * (-len(hb) % 8)
        p = os.path.join(tmp, name + ".safetensors")
        with open(p, "wb") as f:
            f.write(struct.pack("<Q", len(hb)) + hb + bytes(data))
        return p

    def poke(tensor, row, col, value, fmt):
        def edit(h, data):
            off = h[tensor]["data_offsets"][0] + (row * 4 + col) * 4
            data[off:off + 4] = struct.pack(fmt, value)
        return edit

    cases = [
        ("format", lambda h: h["__metadata__"].update(format="moed-routing/0"), None,
         ["not a routing trace", "moed-routing/0"]),
        ("no_layers", lambda h: h["__metadata__"].pop("layers"), None, ["'layers'"]),
        ("layers_json", lambda h: h["__metadata__"].update(layers="0,3,5"), None,
         ["'layers'", "JSON list"]),
        ("topk_gt_e", lambda h: h["__metadata__"].update(num_experts="3"), None,
         ["top_k 4 is more than num_experts 3"]),
        ("experts_text", lambda h: h["__metadata__"].update(num_experts="sixteen"), None,
         ["'num_experts'", "sixteen"]),
        ("missing", lambda h: h.pop("layers.5.topk_weights"), None,
         ["layers.5.topk_weights", "missing"]),
        ("dtype", lambda h: h["layers.3.topk_ids"].update(dtype="I64"), None,
         ["layers.3.topk_ids", "I64"]),
        ("shape", lambda h: h["layers.3.topk_weights"].update(shape=[9, 3]), None,
         ["layers.3.topk_weights", "[9, 3]"]),
        ("extra", lambda h: h.update({"layers.7.topk_ids": h["layers.0.topk_ids"]}), None,
         ["layers.7.topk_ids", "does not list"]),
        # two tensors on the same bytes: moed's reader refuses it, so check does too
        ("overlap", lambda h: h["layers.3.topk_ids"].update(
            data_offsets=h["layers.0.topk_ids"]["data_offsets"]), None,
         ["layers.0.topk_ids", "layers.3.topk_ids", "overlap"]),
        ("out_of_range", None, poke("layers.3.topk_ids", 2, 1, 16, "<i"),
         ["layers.3.topk_ids", "row 2 column 1", "expert 16"]),
        ("negative_id", None, poke("layers.0.topk_ids", 8, 3, -1, "<i"),
         ["row 8 column 3", "expert -1"]),
        ("twice", None, poke("layers.5.topk_ids", 4, 2, int(ids[5][4, 0]), "<i"),
         ["layers.5.topk_ids", "row 4", "twice", "columns 0 and 2"]),
        ("nan", None, poke("layers.5.topk_weights", 1, 0, float("nan"), "<f"),
         ["layers.5.topk_weights", "row 1 column 0", "finite"]),
        ("negative_w", None, poke("layers.0.topk_weights", 6, 3, -0.5, "<f"),
         ["row 6 column 3", "not negative"]),
    ]
    for name, eh, ed, words in cases:
        p = broken(name, eh, ed)
        try:
            mr.read(p)
            check(False, f"broken file {name} was read")
        except mr.TraceError as e:
            for word in words:
                check(word in str(e) and p in str(e), f"{name}: message {e} lacks {word!r}")
        rc, out = cli("check", p)
        check(rc == 1 and words[0] in out, f"check {name}: rc {rc} {out}")
    # the writer checks too, and leaves nothing behind
    bad = mr.Trace([1], {1: np.array([[0, 0]], np.int32)}, {1: np.ones((1, 2), np.float32)}, 4,
                   2)
    try:
        mr.write(os.path.join(tmp, "bad.safetensors"), bad)
        check(False, "the writer wrote a row naming an expert twice")
    except mr.TraceError as e:
        check("twice" in str(e), f"writer message: {e}")
    check(not os.path.exists(os.path.join(tmp, "bad.safetensors")), "a refused trace was written")
    out = ok("check", tmp)
    check("9 tokens x 3 layers [0, 3, 5], top_k 4 of 16 experts" in out, f"check said {out}")


# ------------------------------------------------------------------------------------------
def case_vllm(tmp):
    """vLLM's CompletionOutput.routed_experts, as its capturer and scheduler make it."""
    outs, truths = layouts.vllm_requests()
    truth = np.concatenate(truths)
    check([o.shape for o in outs] == [(15, 4, 2), (9, 4, 2)],
          f"the simulated engine gave {[o.shape for o in outs]}")
    np.save(os.path.join(tmp, "req0.npy"), outs[0])
    np.savez(os.path.join(tmp, "reqs.npz"), req0=outs[0], req1=outs[1])
    with open(os.path.join(tmp, "reqs.json"), "w") as f:
        json.dump([{"request_id": f"r{i}", "routed_experts": o.tolist()}
                   for i, o in enumerate(outs)], f)
    with open(os.path.join(tmp, "reqs.jsonl"), "w") as f:
        for o in outs:
            f.write(json.dumps({"outputs": [{"routed_experts": o.tolist()}]}) + "\n")
    cfg = {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"],
           "num_hidden_layers": 4, "num_experts": 8, "num_experts_per_tok": 2,
           "decoder_sparse_step": 2, "mlp_only_layers": []}
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(cfg, f)

    ok("vllm", f"{tmp}/req0.npy", "--num-experts", 8, "-o", f"{tmp}/a.safetensors")
    mode = os.stat(f"{tmp}/a.safetensors").st_mode & 0o777
    umask = os.umask(0)
    os.umask(umask)
    check(mode == 0o666 & ~umask, f"the trace's mode {mode:o}, want {0o666 & ~umask:o} (umask)")
    # -o into a folder that does not exist: said of the folder, not of a temporary inside it
    refused(("vllm", f"{tmp}/req0.npy", "--num-experts", 8, "-o", f"{tmp}/nosuch/prod"),
            f"{tmp}/nosuch/prod: its folder {tmp}/nosuch does not exist")
    t = mr.read(f"{tmp}/a.safetensors")
    same_trace(t, truths[0], [1, 3], 8, 2, "vllm .npy")
    check(t.tokens_per_step == 0 and "vLLM" in t.source, f"metadata {t.tokens_per_step} {t.source}")
    for src in ("reqs.npz", "reqs.json", "reqs.jsonl"):
        ok("vllm", f"{tmp}/{src}", "--config", tmp, "-o", f"{tmp}/{src}.safetensors")
        t = mr.read(f"{tmp}/{src}.safetensors")
        same_trace(t, truth, [1, 3], 8, 2, f"vllm {src}")
        check(t.family == "qwen3_moe", f"vllm {src}: family {t.family!r}")
    # two files in order, steps given, experts inferred (with a note)
    np.save(os.path.join(tmp, "req1.npy"), outs[1])
    out = ok("vllm", f"{tmp}/req0.npy", f"{tmp}/req1.npy", "--tokens-per-step", 4,
             "--family", "mixtral", "-o", tmp)
    t = mr.read(tmp)
    same_trace(t, truth, [1, 3], int(truth.max()) + 1, 2, "vllm two .npy")
    check(t.tokens_per_step == 4 and t.family == "mixtral", "vllm: --tokens-per-step/--family")
    check("largest id seen + 1" in out, f"no note about inferred experts: {out}")
    ok("vllm", f"{tmp}/reqs.npz", "--layers", "3", "--num-experts", 8, "-o", f"{tmp}/l3")
    same_trace(mr.read(f"{tmp}/l3"), truth, [3], 8, 2, "vllm --layers 3")

    # refused, each with its reason
    bad = outs[0].copy()
    bad[4, 3, 1] = 9
    np.save(f"{tmp}/range.npy", bad)
    refused(["vllm", f"{tmp}/range.npy", "--num-experts", 8, "-o", f"{tmp}/x"],
            "layer 3", "row 4 column 1", "expert 9")
    bad = outs[0].copy()
    bad[2, 1, 1] = bad[2, 1, 0]
    np.save(f"{tmp}/twice.npy", bad)
    refused(["vllm", f"{tmp}/twice.npy", "-o", f"{tmp}/x"], "layer 1", "row 2", "twice")
    refused(["vllm", f"{tmp}/req0.npy", "--top-k", 3, "-o", f"{tmp}/x"], "--top-k says 3")
    refused(["vllm", f"{tmp}/req0.npy", "--layers", "0,1", "-o", f"{tmp}/x"],
            "layer 0 holds no routing")
    refused(["vllm", f"{tmp}/req0.npy", "--layers", "5", "-o", f"{tmp}/x"], "layer 5",
            "4 layers")
    np.save(f"{tmp}/flat.npy", outs[0][:, 1, :])
    refused(["vllm", f"{tmp}/flat.npy", "-o", f"{tmp}/x"], "num_hidden_layers, top_k")
    np.save(f"{tmp}/other.npy", np.zeros((3, 5, 2), np.int32) + [0, 1])
    refused(["vllm", f"{tmp}/req0.npy", f"{tmp}/other.npy", "-o", f"{tmp}/x"], "disagree")
    cfg["num_experts_per_tok"] = 4
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(cfg, f)
    refused(["vllm", f"{tmp}/req0.npy", "--config", tmp, "-o", f"{tmp}/x"],
            "num_experts_per_tok says 4")
    with open(f"{tmp}/none.json", "w") as f:
        json.dump({"text": "hi"}, f)
    refused(["vllm", f"{tmp}/none.json", "-o", f"{tmp}/x"], "no \"routed_experts\"")
    # a config of another layer count: another model's (its layer rule would pick others)
    cfg["num_experts_per_tok"] = 2
    cfg["num_hidden_layers"] = 3
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(cfg, f)
    refused(["vllm", f"{tmp}/req0.npy", "--config", tmp, "-o", f"{tmp}/x"],
            "the record has 4 layers", "num_hidden_layers is 3")
    # a 64-bit id checked before the int32 cast (2^32 + 3 would become expert 3)
    wide = outs[0].astype(np.int64)
    wide[1, 1, 0] = 2 ** 32 + 3
    np.save(f"{tmp}/wide.npy", wide)
    refused(["vllm", f"{tmp}/wide.npy", "--num-experts", 8, "-o", f"{tmp}/x"],
            "row 1 column 0", "expert 4294967299")
    # a damaged npz: one line, not a traceback
    np.savez_compressed(f"{tmp}/comp.npz", a=outs[0])
    raw = bytearray(open(f"{tmp}/comp.npz", "rb").read())
    raw[len(raw) // 3] ^= 0xFF
    open(f"{tmp}/crc.npz", "wb").write(bytes(raw))
    refused(["vllm", f"{tmp}/crc.npz", "-o", f"{tmp}/x"], "crc.npz: cannot read")
    open(f"{tmp}/junk.npz", "wb").write(b"not a zip file at all")
    refused(["vllm", f"{tmp}/junk.npz", "-o", f"{tmp}/x"], "junk.npz: cannot read")
    # a request without tokens in JSON ([] from .tolist()) is skipped, as in an npz
    with open(f"{tmp}/with_empty.json", "w") as f:
        json.dump([{"routed_experts": []}, {"routed_experts": outs[0].tolist()}], f)
    out = ok("vllm", f"{tmp}/with_empty.json", "--num-experts", 8, "-o", f"{tmp}/e.st")
    check(f"{outs[0].shape[0]} tokens" in out, f"the empty request: {out}")
    # bad option values are bad usage: exit 2
    for args in (["--family", "foo"], ["--layers", "3-1"], ["--layers", "a"],
                 ["--tokens-per-step", -5], ["--num-experts", 0], ["--top-k", 0]):
        rc, out = cli("vllm", f"{tmp}/req0.npy", *args, "-o", f"{tmp}/x")
        check(rc == 2, f"{args}: rc {rc} (want 2): {out.strip()}")
    check(not os.path.exists(f"{tmp}/x"), "a refused conversion wrote its output")


# ------------------------------------------------------------------------------------------
def case_sglang_json(tmp):
    """SGLang responses with meta_info.routed_experts (base64 int32)."""
    resps, truths = layouts.sglang_responses()
    truth = np.concatenate(truths)
    with open(f"{tmp}/resps.json", "w") as f:
        json.dump(resps, f)
    with open(f"{tmp}/resps.jsonl", "w") as f:
        for r in resps:
            f.write(json.dumps(r) + "\n")
    with open(f"{tmp}/config.json", "w") as f:
        json.dump({"model_type": "deepseek_v3", "num_hidden_layers": 4, "n_routed_experts": 8,
                   "num_experts_per_tok": 2, "first_k_dense_replace": 1,
                   "moe_layer_freq": 1}, f)
    # each decodes as extract_routed_experts_from_meta_info does
    for r, t in zip(resps, truths):
        flat = np.frombuffer(base64.b64decode(r["meta_info"]["routed_experts"].encode("utf-8")),
                             dtype=np.int32)
        check(np.array_equal(flat.reshape(t.shape), t), "the layout's base64 round trip")
    ok("sglang", f"{tmp}/resps.json", "--num-layers", 4, "--top-k", 2, "--num-experts", 8,
       "-o", f"{tmp}/a.safetensors")
    same_trace(mr.read(f"{tmp}/a.safetensors"), truth, [1, 2], 8, 2, "sglang json")
    # the config names layers 1, 2, 3 (first_k_dense_replace 1): layer 3 recorded nothing
    refused(["sglang", f"{tmp}/resps.jsonl", "--config", tmp, "-o", f"{tmp}/x"],
            "layer 3 holds no routing")
    ok("sglang", f"{tmp}/resps.jsonl", "--config", tmp, "--layers", "1-2", "-o", f"{tmp}/b")
    t = mr.read(f"{tmp}/b")
    same_trace(t, truth, [1, 2], 8, 2, "sglang jsonl")
    check(t.family == "deepseek_v3" and "SGLang" in t.source, f"metadata {t.family} {t.source}")
    refused(["sglang", f"{tmp}/resps.json", "-o", f"{tmp}/x"], "--num-layers", "--config")
    refused(["sglang", f"{tmp}/resps.json", "--num-layers", 3, "--top-k", 2, "-o", f"{tmp}/x"],
            "not whole tokens of 3 layers x 2")
    # cut into whole tokens, but not the response's: prompt + completion - 1 rows
    refused(["sglang", f"{tmp}/resps.json", "--num-layers", 2, "--top-k", 2, "-o", f"{tmp}/x"],
            "[0].meta_info.routed_experts", "16 tokens of 2 layers x top-2",
            "the response ran 8")
    refused(["sglang", f"{tmp}/resps.json", "--config", tmp, "--num-layers", 2, "-o",
             f"{tmp}/x"], "--num-layers 2, but the config says 4")
    # a response without routing (null) is left out with a note
    nulls = [dict(r, meta_info=dict(r["meta_info"])) for r in resps]
    nulls[0]["meta_info"]["routed_experts"] = None
    with open(f"{tmp}/null.json", "w") as f:
        json.dump(nulls, f)
    out = ok("sglang", f"{tmp}/null.json", "--num-layers", 4, "--top-k", 2, "--num-experts", 8,
             "-o", f"{tmp}/n.st")
    check("1 response(s)" in out and "null" in out and
          f"{sum(t.shape[0] for t in truths[1:])} tokens" in out, f"null response: {out}")
    resps[1]["meta_info"]["routed_experts"] = "not base64!"
    with open(f"{tmp}/bad.json", "w") as f:
        json.dump(resps, f)
    refused(["sglang", f"{tmp}/bad.json", "--config", tmp, "-o", f"{tmp}/x"], "not base64",
            "[1].meta_info.routed_experts")
    check(not os.path.exists(f"{tmp}/x"), "a refused conversion wrote its output")


# ------------------------------------------------------------------------------------------
def sglang_dump_checks(tmp, path, reader, label):
    dump, truth = layouts.sglang_dump()
    ok("sglang", path, "--reader", reader, "-o", f"{tmp}/{label}.safetensors")
    t = mr.read(f"{tmp}/{label}.safetensors")
    same_trace(t, truth, [1, 2, 3], 8, 4, f"sglang dump {label}")
    check(t.rows == 20 and t.tokens_per_step == 0, f"{label}: rows {t.rows} steps "
                                                   f"{t.tokens_per_step}")
    check("4 forward passes" in t.source, f"{label}: source {t.source}")
    ok("sglang", path, "--reader", reader, "--layers", "2", "--tokens-per-step", 5,
       "--family", "deepseek_v3", "-o", f"{tmp}/{label}2")
    t = mr.read(f"{tmp}/{label}2")
    same_trace(t, truth, [2], 8, 4, f"sglang dump {label} --layers 2")
    check(t.tokens_per_step == 5 and t.family == "deepseek_v3", f"{label}: options")
    refused(["sglang", path, "--reader", reader, "--layers", "0", "-o", f"{tmp}/x"],
            "layer 0 holds no routing")
    refused(["sglang", path, "--reader", reader, "--top-k", 2, "-o", f"{tmp}/x"],
            "--top-k says 2")


def case_sglang_dump(tmp):
    """The committed dump (written by torch.save, make_sglang_dump.py) read without torch."""
    sglang_dump_checks(tmp, FIXTURE, "builtin", "fixture")
    # the built-in reader builds tensors and containers, nothing else
    evil = os.path.join(tmp, "evil.pt")
    with zipfile.ZipFile(evil, "w") as z:
        z.writestr("evil/data.pkl", pickle.dumps({"records": os.system}, protocol=2))
    refused(["sglang", evil, "--reader", "builtin", "-o", f"{tmp}/x"], "refusing to build",
            "system")
    # a tensor reaching past its storage
    with zipfile.ZipFile(FIXTURE) as z:
        entries = {n: z.read(n) for n in z.namelist()}
    prefix = [n for n in entries if n.endswith("data.pkl")][0][:-len("data.pkl")]
    entries[prefix + "data/0"] = entries[prefix + "data/0"][:100]
    short = os.path.join(tmp, "short.pt")
    with zipfile.ZipFile(short, "w") as z:
        for n, b in entries.items():
            z.writestr(n, b)
    refused(["sglang", short, "--reader", "builtin", "-o", f"{tmp}/x"], "storage")
    with open(f"{tmp}/junk.pt", "wb") as f:
        f.write(b"PK\x03\x04 not really a zip")
    refused(["sglang", f"{tmp}/junk.pt", "--reader", "builtin", "-o", f"{tmp}/x"],
            "junk.pt")


def case_sglang_torch(tmp):
    """A dump written now by torch.save, read with torch and without; malformed dumps."""
    try:
        import torch  # noqa: F401
    except ImportError:
        skip("torch is not importable (the committed dump is read by tools.import_sglang_dump)")
    import make_sglang_dump as mk
    dump, _ = layouts.sglang_dump()
    path = os.path.join(tmp, "expert_distribution_recorder_1.0_0.pt")
    mk.write(path, dump)
    for reader in ("torch", "builtin"):
        sglang_dump_checks(tmp, path, reader, reader)
    d2, _ = layouts.sglang_dump()
    d2["records"][1]["topk_ids_of_layer"][2, 1, 3] = -1  # one token with 3 of 4 experts
    mk.write(f"{tmp}/short_row.pt", d2)
    refused(["sglang", f"{tmp}/short_row.pt", "-o", f"{tmp}/x"], "token 13 of layer 2",
            "--disable-shared-experts-fusion")
    mk.write(f"{tmp}/stat.pt", {"rank": 0, "logical_count": np.zeros((5, 4, 8), np.int32),
                                "average_utilization_rate_over_window": None})
    refused(["sglang", f"{tmp}/stat.pt", "-o", f"{tmp}/x"], "mode stat", "per_token")
    d3, _ = layouts.sglang_dump()
    d3["last_physical_to_logical_map"] = d3["last_physical_to_logical_map"][:, :9]
    mk.write(f"{tmp}/map.pt", d3)
    refused(["sglang", f"{tmp}/map.pt", "-o", f"{tmp}/x"], "physical expert 9", "the map has 9")


# ------------------------------------------------------------------------------------------
def case_hf_hooks(tmp):
    """The recorder's hooks on stand-ins of each layout transformers has had (torch only)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        skip("torch is not importable")
    import hf_standins as st
    import moed_routing_hf as hfr
    torch.manual_seed(0)
    for name, family, build in st.MODELS:
        model = build()
        ids = [int(x) for x in torch.randint(0, 50, (13,))]
        for chunk in (0, 5):
            for b in st.blocks(model):
                b.truth = []
            t = hfr.record(model, ids, layers=None, chunk=chunk, source=name)
            check(t.family == family, f"{name}: family {t.family}, want {family}")
            want_layers = [i for i, b in st.layer_blocks(model)]
            check(t.layer_ids == want_layers, f"{name}: layers {t.layer_ids} want {want_layers}")
            for L, b in st.layer_blocks(model):
                tid = torch.cat([i for i, _ in b.truth]).reshape(-1, b.top_k).numpy()
                tw = torch.cat([w for _, w in b.truth]).reshape(-1, b.top_k).float().numpy()
                check(np.array_equal(t.ids[L], tid.astype(np.int32)),
                      f"{name} chunk {chunk}: layer {L} ids differ from what the block used")
                check(np.array_equal(t.weights[L], tw),
                      f"{name} chunk {chunk}: layer {L} weights differ from the block's")
            check(st.EXPECT_KIND[name] in t.source, f"{name}: source {t.source!r} does not say "
                                                    f"{st.EXPECT_KIND[name]!r}")
    model = st.MODELS[1][2]()  # qwen2_moe: layer 0 dense
    try:
        hfr.record(model, [1, 2, 3], layers=[0])
        check(False, "--layers with a dense layer was accepted")
    except srcs.SourceError as e:
        check("have no MoE block" in str(e), f"message: {e}")
    try:
        hfr.record(st.opaque_model(), [1, 2, 3])
        check(False, "a block the hooks cannot see was recorded")
    except srcs.SourceError as e:
        check("did not see the routing of all 3 tokens" in str(e), f"message: {e}")
    check(srcs.family_of({"model_type": "kimi_k2"}) == "deepseek_v3", "kimi_k2 family")
    # the CLI's wiring, with a stand-in transformers package (the real one: tools.import_hf)
    fake = os.path.join(tmp, "fake", "transformers")
    os.makedirs(fake)
    with open(os.path.join(fake, "__init__.py"), "w") as f:
        f.write(st.FAKE_TRANSFORMERS)
    name = "deepseek_v3 4.5x"
    model = st.build_seeded(name)
    d = os.path.join(tmp, "ckpt")
    os.makedirs(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({**model.config.to_dict(), "standin": name, "vocab_size": 50}, f)
    with open(os.path.join(d, "text.txt"), "w") as f:
        f.write("routing, recorded")
    with open(os.path.join(d, "ids.txt"), "w") as f:
        f.write("1, 2 3\n4 5,6 7 8")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(fake), MOED_STANDINS=HERE)
    for how, arg, ids, extra in (("--text", "text.txt", [ord(c) % 50 for c in "routing, rec"],
                                  ["--max-tokens", "12"]),
                                 ("--token-ids", "ids.txt", [1, 2, 3, 4, 5, 6, 7, 8],
                                  ["--chunk", "3", "--tokens-per-step", "4"])):
        out = os.path.join(tmp, f"hf{how}.safetensors")
        p = subprocess.run([sys.executable, CLI, "hf", "--model", d, how, os.path.join(d, arg),
                            "-o", out] + extra, capture_output=True, text=True, env=env,
                           timeout=300)
        check(p.returncode == 0, f"hf {how}: rc {p.returncode}: {p.stdout}{p.stderr}")
        if p.returncode:
            continue
        t = mr.read(out)
        want = hfr.record(st.build_seeded(name), ids)
        check(t.layer_ids == [1, 2] and t.family == "deepseek_v3" and t.rows == len(ids),
              f"hf {how}: {t.layer_ids} {t.family} {t.rows}")
        for L in t.layer_ids:
            check(np.array_equal(t.ids[L], want.ids[L]) and
                  np.array_equal(t.weights[L], want.weights[L]), f"hf {how}: layer {L} differs")
        check("transformers 0-standin" in t.source, f"hf {how}: source {t.source}")
    check(mr.read(os.path.join(tmp, "hf--token-ids.safetensors")).tokens_per_step == 4,
          "hf --tokens-per-step")
    with open(os.path.join(d, "big.txt"), "w") as f:
        f.write("[1, 2, 99]")
    p = subprocess.run([sys.executable, CLI, "hf", "--model", d, "--token-ids",
                        os.path.join(d, "big.txt"), "-o", os.path.join(tmp, "x")],
                       capture_output=True, text=True, env=env, timeout=300)
    check(p.returncode == 1 and "token id 99 is past the model's vocabulary (50)" in p.stderr,
          f"hf: a token past the vocabulary: rc {p.returncode} {p.stderr}")


# ------------------------------------------------------------------------------------------
def case_hf(tmp):
    """A tiny random model of each family, through `moed-routing-import hf`, against the NumPy
    reference router (tests/models/make_reference.py route) on the block inputs."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        skip(f"{e.name} is not importable (pip install torch transformers in a venv, then "
             "ctest -L tools with that python3 first on PATH)")
    import hf_reference
    hf_reference.run(tmp, cli, check)


CASES = {"format": case_format, "vllm": case_vllm, "sglang_json": case_sglang_json,
         "sglang_dump": case_sglang_dump, "sglang_torch": case_sglang_torch,
         "hf_hooks": case_hf_hooks, "hf": case_hf}


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        print(f"usage: test_import.py {'|'.join(CASES)}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="moed-tools-") as tmp:
        CASES[sys.argv[1]](tmp)
    if FAILS:
        print(f"{len(FAILS)} check(s) failed")
        return 1
    print(f"PASS: {sys.argv[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
