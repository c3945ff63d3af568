"""moed-routing/1: routing traces, written and read with NumPy only (docs/routing.md).

A trace is a safetensors file (8-byte little-endian header length, a JSON header, the raw
little-endian data) holding, for each decoder layer L listed in the metadata "layers":

    layers.<L>.topk_ids      I32 [rows, top_k]  logical expert ids, distinct in a row
    layers.<L>.topk_weights  F32 [rows, top_k]  the weights the expert outputs are summed with

with the same rows (tokens in global order, step after step) in every layer, and
__metadata__ (strings): format "moed-routing/1", num_experts, top_k, tokens_per_step ("0":
not in steps), layers (a JSON list, "[0, 1, 5]"), family, source, weights ("router", or
"uniform": the source had no weights, 1/k each).

The checks follow moed's C reader (runtime/src/model/routing_trace.c) and its bounds; every
error names the file and the tensor, and the row and column of a bad value.
"""

import json
import os
import struct
import tempfile

import numpy as np

FORMAT = "moed-routing/1"
FILE_NAME = "routing.safetensors"
MAX_EXPERTS = 1024          # MOE_MAX_EXPERTS (runtime/include/moe/limits.h)
MAX_LAYERS = 4096           # TRACE_MAX_LAYERS (routing_trace.c)
MAX_LAYER_INDEX = 1000000
MAX_TOKENS_PER_STEP = 2**31 - 1
MAX_HEADER = 100 * 1024 * 1024


class TraceError(Exception):
    """A trace (or what would become one) that moed would refuse; the message says why."""


class Trace:
    """A routing trace in memory: layer_ids (file order) and, per layer id, ids [rows, k]
    int32 and weights [rows, k] float32."""

    def __init__(self, layer_ids, ids, weights, num_experts, top_k, tokens_per_step=0,
                 family="", source="", uniform_weights=False, path=""):
        self.layer_ids = [int(L) for L in layer_ids]
        self.ids = ids
        self.weights = weights
        self.num_experts = int(num_experts)
        self.top_k = int(top_k)
        self.tokens_per_step = int(tokens_per_step)
        self.family = family
        self.source = source
        self.uniform_weights = bool(uniform_weights)
        self.path = path

    @property
    def rows(self):
        return int(self.ids[self.layer_ids[0]].shape[0]) if self.layer_ids else 0


def resolve(path):
    """PATH, or PATH/routing.safetensors when PATH is a folder (as moed resolves it)."""
    return os.path.join(path, FILE_NAME) if os.path.isdir(path) else path


def uniform_weights(rows, top_k):
    """[rows, top_k] float32 of 1/k: what a trace holds for a source that had no weights."""
    return np.full((rows, top_k), np.float32(1.0) / np.float32(top_k), dtype=np.float32)


def _whole(what, value, lo, hi):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
        raise TraceError(f"{what} is {value!r}; expected a whole number in [{lo}, {hi}]")
    return int(value)


def check_rows(where, ids, weights, num_experts, top_k, ids_name="topk_ids",
               weights_name="topk_weights"):
    """Every row of one layer: ids in [0, num_experts), distinct within the row, weights
    finite and not negative. `where` starts each message (a file, a source)."""
    ids = np.asarray(ids)
    weights = np.asarray(weights)
    if ids.ndim != 2 or ids.shape[1] != top_k or ids.shape[0] < 1:
        raise TraceError(f"{where}: '{ids_name}' has shape {list(ids.shape)}; expected "
                         f"[tokens >= 1, {top_k}] (top_k columns)")
    if weights.shape != ids.shape:
        raise TraceError(f"{where}: '{weights_name}' has shape {list(weights.shape)}; expected "
                         f"{list(ids.shape)} (one weight per chosen expert)")
    bad = np.argwhere((ids < 0) | (ids >= num_experts))
    if len(bad):
        r, c = (int(x) for x in bad[0])
        raise TraceError(f"{where}: '{ids_name}' row {r} column {c} is expert {int(ids[r, c])}; "
                         f"the trace has {num_experts} experts (0 to {num_experts - 1})")
    if top_k > 1:
        srt = np.sort(ids, axis=1)
        dup = np.argwhere(srt[:, 1:] == srt[:, :-1])
        if len(dup):
            r = int(dup[0][0])
            e = int(srt[r, dup[0][1]])
            cols = [int(c) for c in np.flatnonzero(ids[r] == e)[:2]]
            raise TraceError(f"{where}: '{ids_name}' row {r} names expert {e} twice (columns "
                             f"{cols[0]} and {cols[1]}): a token picks an expert at most once")
    bad = np.argwhere(~np.isfinite(weights) | (weights < 0))
    if len(bad):
        r, c = (int(x) for x in bad[0])
        raise TraceError(f"{where}: '{weights_name}' row {r} column {c} is {weights[r, c]}; "
                         "weights are finite and not negative")


def check(trace):
    """Raises TraceError for anything moed's reader would refuse."""
    where = trace.path or "trace"
    _whole(f"{where}: num_experts", trace.num_experts, 1, MAX_EXPERTS)
    _whole(f"{where}: top_k", trace.top_k, 1, MAX_EXPERTS)
    if trace.top_k > trace.num_experts:
        raise TraceError(f"{where}: top_k {trace.top_k} is more than num_experts "
                         f"{trace.num_experts}")
    _whole(f"{where}: tokens_per_step", trace.tokens_per_step, 0, MAX_TOKENS_PER_STEP)
    if not 1 <= len(trace.layer_ids) <= MAX_LAYERS:
        raise TraceError(f"{where}: {len(trace.layer_ids)} layers; a trace has 1 to "
                         f"{MAX_LAYERS}")
    seen = set()
    rows = None
    for L in trace.layer_ids:
        _whole(f"{where}: layer index", L, 0, MAX_LAYER_INDEX)
        if L in seen:
            raise TraceError(f"{where}: layer {L} is listed twice")
        seen.add(L)
        if L not in trace.ids or L not in trace.weights:
            raise TraceError(f"{where}: layer {L} is listed but has no ids or weights")
        ids, w = trace.ids[L], trace.weights[L]
        check_rows(where, ids, w, trace.num_experts, trace.top_k, f"layers.{L}.topk_ids",
                   f"layers.{L}.topk_weights")
        if rows is not None and ids.shape[0] != rows:
            raise TraceError(f"{where}: layer {L} has {ids.shape[0]} rows, layer "
                             f"{trace.layer_ids[0]} {rows}: the same tokens in every layer")
        rows = ids.shape[0]


def _header_bytes(header):
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    return raw + b" " * (-len(raw) % 8)  # pad to 8 bytes, as moed's writer does


def write(path, trace):
    """Checks the trace and writes it to `path` (a folder: path/routing.safetensors) whole
    or not at all (a temporary file in the same folder, fsync, rename). Returns the path."""
    path = resolve(path)
    trace.path = path
    check(trace)
    meta = {"format": FORMAT, "num_experts": str(trace.num_experts), "top_k": str(trace.top_k),
            "tokens_per_step": str(trace.tokens_per_step),
            "layers": "[" + ", ".join(str(L) for L in trace.layer_ids) + "]",
            "family": trace.family or "", "source": trace.source or "",
            "weights": "uniform" if trace.uniform_weights else "router"}
    header = {"__metadata__": meta}
    blobs = []
    off = 0
    for L in trace.layer_ids:
        for what, dtype, arr in (("topk_ids", "I32", np.asarray(trace.ids[L], dtype="<i4")),
                                 ("topk_weights", "F32", np.asarray(trace.weights[L], dtype="<f4"))):
            data = np.ascontiguousarray(arr).tobytes()
            header[f"layers.{L}.{what}"] = {"dtype": dtype, "shape": list(arr.shape),
                                           "data_offsets": [off, off + len(data)]}
            blobs.append(data)
            off += len(data)
    head = _header_bytes(header)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):  # said of the folder, not of the temporary inside it
        what = "is not a folder" if os.path.exists(folder) else "does not exist (make it first)"
        raise TraceError(f"{path}: its folder {folder} {what}")
    fd, tmp = tempfile.mkstemp(prefix=".routing.", suffix=".tmp", dir=folder)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # as any file written with open(): mkstemp's is 0600
        with os.fdopen(fd, "wb") as f:
            f.write(struct.pack("<Q", len(head)))
            f.write(head)
            for b in blobs:
                f.write(b)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def _meta_int(path, meta, key, lo, hi, required=True):
    v = meta.get(key)
    if v is None:
        if required:
            raise TraceError(f"{path}: a moed-routing/1 trace needs the metadata key '{key}' "
                             "(a string holding a whole number)")
        return 0
    try:
        if not isinstance(v, str) or v.strip() != v or not v.lstrip("-").isdigit():
            raise ValueError
        x = int(v)
    except ValueError:
        x = None
    if x is None or not lo <= x <= hi:
        raise TraceError(f"{path}: metadata '{key}' is '{str(v)[:64]}'; expected a whole "
                         f"number in [{lo}, {hi}]")
    return x


def _meta_layers(path, meta):
    v = meta.get("layers")
    if v is None:
        raise TraceError(f"{path}: a moed-routing/1 trace needs the metadata key 'layers' (a "
                         "JSON list of layer indices, \"[0, 1]\")")
    try:
        lst = json.loads(v)
    except (TypeError, ValueError):
        lst = None
    if not isinstance(lst, list) or not 1 <= len(lst) <= MAX_LAYERS:
        raise TraceError(f"{path}: metadata 'layers' is '{str(v)[:80]}'; expected a JSON list "
                         f"of 1 to {MAX_LAYERS} layer indices")
    out = []
    for i, x in enumerate(lst):
        if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x <= MAX_LAYER_INDEX:
            raise TraceError(f"{path}: metadata 'layers' entry {i} is not a layer index (a "
                             "whole number >= 0)")
        if x in out:
            raise TraceError(f"{path}: metadata 'layers' names layer {x} twice")
        out.append(x)
    return out


def _read_header(path, f, size):
    raw = f.read(8)
    if len(raw) < 8:
        raise TraceError(f"{path}: {size} bytes: too short for a safetensors file")
    (n,) = struct.unpack("<Q", raw)
    if n < 2 or n > MAX_HEADER or 8 + n > size:
        raise TraceError(f"{path}: the safetensors header length {n} does not fit the file "
                         f"({size} bytes)")
    try:
        header = json.loads(f.read(n).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise TraceError(f"{path}: the safetensors header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise TraceError(f"{path}: the safetensors header is not a JSON object")
    return header, 8 + n


def read(path, data=True):
    """Reads and checks a trace (a file, or a folder holding routing.safetensors). With
    data False only the header is checked and the Trace has empty ids and weights."""
    path = resolve(path)
    try:
        size = os.path.getsize(path)
        f = open(path, "rb")
    except OSError as e:
        raise TraceError(f"{path}: cannot read the routing trace: {e.strerror}") from None
    with f:
        header, base = _read_header(path, f, size)
        meta = header.get("__metadata__") or {}
        if not isinstance(meta, dict):
            raise TraceError(f"{path}: the safetensors __metadata__ is not an object")
        fmt = meta.get("format")
        if fmt != FORMAT:
            shown = f"'{str(fmt)[:64]}'" if fmt is not None else "absent"
            raise TraceError(f"{path}: not a routing trace: its metadata 'format' is {shown}, "
                             f"expected '{FORMAT}' (docs/routing.md)")
        e = _meta_int(path, meta, "num_experts", 1, MAX_EXPERTS)
        k = _meta_int(path, meta, "top_k", 1, MAX_EXPERTS)
        tps = _meta_int(path, meta, "tokens_per_step", 0, MAX_TOKENS_PER_STEP, required=False)
        if k > e:
            raise TraceError(f"{path}: metadata top_k {k} is more than num_experts {e}")
        wmode = meta.get("weights", "router")
        if wmode not in ("router", "uniform"):
            raise TraceError(f"{path}: metadata 'weights' is '{str(wmode)[:32]}'; expected "
                             "'router' or 'uniform'")
        layers = _meta_layers(path, meta)
        trace = Trace(layers, {}, {}, e, k, tps, meta.get("family", ""), meta.get("source", ""),
                      wmode == "uniform", path)
        rows = None
        infos, spans = {}, []
        for L in layers:
            for what, dtype in (("topk_ids", "I32"), ("topk_weights", "F32")):
                name = f"layers.{L}.{what}"
                t = header.get(name)
                if not isinstance(t, dict):
                    raise TraceError(f"{path}: layer {L} is listed in the metadata but tensor "
                                     f"'{name}' is missing")
                if t.get("dtype") != dtype:
                    raise TraceError(f"{path}: tensor '{name}' has dtype {t.get('dtype')}; a "
                                     f"trace's {what} are {dtype}")
                shape = t.get("shape")
                ok = (isinstance(shape, list) and len(shape) == 2 and
                      all(isinstance(d, int) and not isinstance(d, bool) for d in shape) and
                      shape[1] == k and shape[0] >= 1 and (rows is None or shape[0] == rows))
                if not ok:
                    want = f"[{rows}, {k}] (the same tokens in every layer, top_k columns)" \
                        if rows is not None else f"[tokens >= 1, {k}] (top_k columns)"
                    raise TraceError(f"{path}: tensor '{name}' has shape {shape}; expected "
                                     f"{want}")
                rows = shape[0]
                offs = t.get("data_offsets")
                nbytes = rows * k * 4
                if (not isinstance(offs, list) or len(offs) != 2 or
                        not all(isinstance(o, int) for o in offs) or offs[0] < 0 or
                        offs[1] - offs[0] != nbytes or base + offs[1] > size):
                    raise TraceError(f"{path}: tensor '{name}' data_offsets {offs} do not hold "
                                     f"{nbytes} bytes inside the file ({size} bytes)")
                infos[name] = (offs[0], dtype)
                spans.append((offs[0], offs[1], name))
        spans.sort()  # no two tensors' bytes shared (moed's reader refuses that too)
        for (a0, a1, an), (b0, b1, bn) in zip(spans, spans[1:]):
            if b0 < a1:
                raise TraceError(f"{path}: tensors '{an}' {[a0, a1]} and '{bn}' {[b0, b1]} "
                                 "overlap")
        for name in header:
            if name.startswith("layers."):
                parts = name.split(".")
                if len(parts) >= 3 and parts[1].isdigit() and int(parts[1]) not in layers:
                    raise TraceError(f"{path}: tensor '{name[:200]}' belongs to layer "
                                     f"{int(parts[1])}, which the metadata 'layers' does not "
                                     "list")
        if not data:
            return trace
        for L in layers:
            arrs = []
            for what in ("topk_ids", "topk_weights"):
                off, dtype = infos[f"layers.{L}.{what}"]
                f.seek(base + off)
                buf = f.read(rows * k * 4)
                arrs.append(np.frombuffer(buf, dtype="<i4" if dtype == "I32" else "<f4")
                            .reshape(rows, k).astype(np.int32 if dtype == "I32" else np.float32))
            check_rows(path, arrs[0], arrs[1], e, k, f"layers.{L}.topk_ids",
                       f"layers.{L}.topk_weights")
            trace.ids[L], trace.weights[L] = arrs
        return trace
