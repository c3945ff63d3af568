"""What serving engines write about routing, read with NumPy (and torch when it is there),
turned into moed-routing/1 traces (moed_routing.py). docs/routing.md, "Import".

vLLM (vllm/outputs.py CompletionOutput.routed_experts, filled by
vllm/model_executor/layers/fused_moe/routed_experts_capturer.py RoutedExpertsCapturer and
RoutedExpertsReader, read back in vllm/v1/core/sched/scheduler.py _get_routed_experts): with
--enable-return-routed-experts (LLM(..., enable_return_routed_experts=True)) each finished
request's output carries an int32 array [num_tokens - 1, num_hidden_layers,
num_experts_per_tok]: one row per token that went through the model (prompt then generated;
the last sampled token never did), one slot per decoder layer (a dense layer's slots stay 0),
the experts' ids in the router's top-k order, no weights. vLLM hands it over in memory; this
reads it as the user saved it: np.save (.npy, one request), np.savez (.npz, one array per
request) or JSON (.tolist(), or objects with a "routed_experts" key, .json or .jsonl).

SGLang, two sources:
 * --expert-distribution-recorder-mode per_token, recording between /start_expert_distribution_
   record and /dump_expert_distribution_record (python/sglang/srt/eplb/expert_distribution.py:
   _DetailSinglePassGatherer.collect, _DetailAccumulator.dump, _dump_to_file): torch.save of
   dict(records=[dict(forward_pass_id, rank, gatherer_key, input_ids, positions,
   extend_seq_lens, forward_mode, topk_ids_of_layer, misc_objects, global_physical_count)],
   last_physical_to_logical_map) into $SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR (default /tmp)
   as expert_distribution_recorder_<time>_<rank>.pt; topk_ids_of_layer is int32
   [num_layers, tokens of that forward pass, 8], -1 where nothing was written (columns past
   top_k, layers without experts), physical expert ids (last_physical_to_logical_map
   [num_layers, num_physical_experts] maps them back).
 * --enable-return-routed-experts with "return_routed_experts": true in the request
   (python/sglang/srt/state_capturer/routed_experts.py, extract_routed_experts_from_meta_info):
   meta_info["routed_experts"] of each response is base64 of the int32 bytes of
   [seqlen - 1, num_hidden_layers, num_experts_per_tok] (dense layers 0).
"""

import base64
import binascii
import collections
import json
import os
import pickle
import sys
import zipfile
import zlib

import numpy as np

import moed_routing as mr

# config.json model_type (and architectures) -> moed's model.family.
MODEL_TYPES = {"mixtral": "mixtral", "qwen2_moe": "qwen2_moe", "qwen3_moe": "qwen3_moe",
               "deepseek_v2": "deepseek_v2", "deepseek_v3": "deepseek_v3",
               "kimi_k2": "deepseek_v3", "gpt_oss": "gpt_oss"}
ARCHITECTURES = {"MixtralForCausalLM": "mixtral", "Qwen2MoeForCausalLM": "qwen2_moe",
                 "Qwen3MoeForCausalLM": "qwen3_moe", "DeepseekV2ForCausalLM": "deepseek_v2",
                 "DeepseekV3ForCausalLM": "deepseek_v3", "GptOssForCausalLM": "gpt_oss"}
FAMILIES = sorted(set(MODEL_TYPES.values()))


class SourceError(Exception):
    """Input that cannot become a trace; the message names the file and what is wrong."""


# ------------------------------------------------------------------------------------------
# A model's config.json: family, sizes, which decoder layers have experts.

def load_config(path):
    """config.json (or a folder holding it) as a dict; a multimodal config's text_config
    (vLLM's hf_text_config) supplies the sizes."""
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise SourceError(f"{path}: cannot read the model config: {e}") from None
    if not isinstance(cfg, dict):
        raise SourceError(f"{path}: not a config.json (a JSON object)")
    text = cfg.get("text_config")
    if isinstance(text, dict):
        merged = dict(text)
        for k in ("model_type", "architectures"):
            merged.setdefault(k, cfg.get(k))
        cfg = merged
    cfg["_path"] = path
    return cfg


def family_of(cfg):
    fam = MODEL_TYPES.get(cfg.get("model_type"))
    for arch in cfg.get("architectures") or []:
        fam = fam or ARCHITECTURES.get(arch)
    return fam


def num_experts_of(cfg):
    for key in ("n_routed_experts", "num_local_experts", "num_experts"):
        if isinstance(cfg.get(key), int) and cfg[key] > 0:
            return cfg[key]
    return None


def top_k_of(cfg):
    for key in ("num_experts_per_tok", "experts_per_token"):
        if isinstance(cfg.get(key), int) and cfg[key] > 0:
            return cfg[key]
    return None


def moe_layers_of(cfg, family=None):
    """The decoder layers with routed experts, by the family's rule (docs/models.md):
    mixtral and gpt_oss every layer; qwen l not in mlp_only_layers and (l + 1) %
    decoder_sparse_step == 0; deepseek l >= first_k_dense_replace and l % moe_layer_freq
    == 0."""
    family = family or family_of(cfg)
    n = cfg.get("num_hidden_layers")
    if not isinstance(n, int) or n < 1:
        raise SourceError(f"{cfg.get('_path', 'config')}: no num_hidden_layers")
    if family in ("mixtral", "gpt_oss"):
        return list(range(n))
    if family in ("qwen2_moe", "qwen3_moe"):
        step = cfg.get("decoder_sparse_step") or 1
        skip = set(cfg.get("mlp_only_layers") or [])
        return [l for l in range(n) if l not in skip and (l + 1) % step == 0]
    if family in ("deepseek_v2", "deepseek_v3"):
        first = cfg.get("first_k_dense_replace") or 0
        freq = cfg.get("moe_layer_freq") or 1
        return [l for l in range(n) if l >= first and l % freq == 0]
    raise SourceError(f"{cfg.get('_path', 'config')}: model_type {cfg.get('model_type')!r} is "
                      f"none of moed's families ({', '.join(FAMILIES)})")


def parse_layers(text):
    """"1,3,5-7" -> [1, 3, 5, 6, 7]."""
    out = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part:
                a, b = (int(x) for x in part.split("-", 1))
                if b < a:
                    raise SourceError(f"--layers {text!r}: the range {part} goes down; write "
                                      f"{b}-{a}")
                out.extend(range(a, b + 1))
            else:
                out.append(int(part))
        except ValueError:
            raise SourceError(f"--layers {text!r}: expected layer indices like 1,3,5-7") from None
    if not out or min(out) < 0 or len(set(out)) != len(out):
        raise SourceError(f"--layers {text!r}: expected distinct layer indices >= 0")
    return out


# ------------------------------------------------------------------------------------------
# [tokens, layers, top_k] arrays (vLLM, SGLang) -> a trace.

class Options:
    """What the user said on the command line (None: not given)."""

    def __init__(self, num_experts=None, top_k=None, layers=None, config=None, family=None,
                 tokens_per_step=None, num_layers=None):
        self.num_experts = num_experts
        self.top_k = top_k
        self.layers = layers
        self.config = config
        self.family = family
        self.tokens_per_step = tokens_per_step
        self.num_layers = num_layers


def _pick_layers(where, arr, opts, empty):
    """The decoder layers to keep of arr [T, L, k]: --layers, the config's MoE layers, or
    every layer whose slots are not all `empty` (what the engine leaves in a dense layer).
    vLLM's and SGLang's records have a slot for every decoder layer: a config of another
    layer count is another model's (its layer rule would keep the wrong ones)."""
    L = arr.shape[1]
    n_cfg = opts.config.get("num_hidden_layers") if opts.config is not None else None
    if isinstance(n_cfg, int) and n_cfg != L:
        raise SourceError(f"{where}: the record has {L} layers, the config's "
                          f"num_hidden_layers is {n_cfg}: the config of another model?")
    if opts.layers is not None:
        layers = list(opts.layers)
    elif opts.config is not None:
        layers = moe_layers_of(opts.config, opts.family)
    else:
        layers = [l for l in range(L) if not np.all(arr[:, l, :] == empty)]
        if not layers:
            raise SourceError(f"{where}: every layer's slots are {empty}: no routing recorded")
    for l in layers:
        if l >= L:
            raise SourceError(f"{where}: layer {l} asked for, but the record has {L} layers "
                              f"(0 to {L - 1})")
        if arr.shape[2] > 1 and np.all(arr[:, l, :] == empty):
            raise SourceError(f"{where}: layer {l} holds no routing (every slot is {empty}: a "
                              "layer without experts?); leave it out of --layers")
    return layers


def build_trace(where, arr, opts, source, empty=0, weights=None, natural_step=0):
    """arr: int [T, L, k] expert ids per token and decoder layer; weights: float [T, L, k]
    or None (uniform 1/k). Checks everything and returns a moed_routing.Trace."""
    if arr.ndim != 3 or arr.shape[0] < 1 or arr.shape[2] < 1:
        raise SourceError(f"{where}: expected [tokens, layers, top_k] routing, got shape "
                          f"{list(arr.shape)}")
    k = arr.shape[2]
    cfg_k = top_k_of(opts.config) if opts.config is not None else None
    for what, want in (("--top-k", opts.top_k), ("config num_experts_per_tok", cfg_k)):
        if want is not None and want != k:
            raise SourceError(f"{where}: {k} experts per token in the record, {what} says "
                              f"{want}")
    layers = _pick_layers(where, arr, opts, empty)
    e = opts.num_experts
    if e is None and opts.config is not None:
        e = num_experts_of(opts.config)
    inferred = e is None
    if inferred:
        e = int(arr[:, layers, :].max()) + 1
    if e < k:
        raise SourceError(f"{where}: num_experts {e} is less than the {k} experts per token")
    ids, wts = {}, {}
    for l in layers:
        wts[l] = (mr.uniform_weights(arr.shape[0], k) if weights is None
                  else np.ascontiguousarray(weights[:, l, :], dtype=np.float32))
        try:  # the ids as recorded, before the int32 cast (which would wrap a 64-bit id)
            mr.check_rows(f"{where}: layer {l}", arr[:, l, :], wts[l], e, k, "ids", "weights")
        except mr.TraceError as err:
            hint = ("" if inferred or "is expert" not in str(err)
                    else " (is --num-experts, or the config's, right?)")
            raise SourceError(f"{err}{hint}") from None
        ids[l] = np.ascontiguousarray(arr[:, l, :], dtype=np.int32)
    tps = opts.tokens_per_step if opts.tokens_per_step is not None else natural_step
    family = opts.family or (family_of(opts.config) if opts.config is not None else "") or ""
    trace = mr.Trace(layers, ids, wts, e, k, tps, family, source[:500], weights is None)
    trace.inferred_experts = inferred
    return trace


# ------------------------------------------------------------------------------------------
# JSON: objects with a "routed_experts" key (vLLM saved by hand, SGLang responses).

def _json_values(path):
    with open(path, "rb") as f:
        raw = f.read()
    try:
        return [json.loads(raw)]
    except ValueError:
        pass
    out = []
    for i, line in enumerate(raw.splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except ValueError as e:
                raise SourceError(f"{path}:{i}: neither JSON nor JSON lines: {e}") from None
    return out


def _is_numeric_3d(v):
    return (isinstance(v, list) and v and isinstance(v[0], list) and v[0] and
            isinstance(v[0][0], list) and (not v[0][0] or isinstance(v[0][0][0], (int, float))))


def routed_experts_values(path):
    """Every "routed_experts" value in the file, in order (a response, a list of responses,
    JSON lines, meta_info nesting), or bare [T][L][k] lists: (label, value, rows) with rows
    the tokens that went through the model where the object beside it says (SGLang's
    meta_info: prompt_tokens + completion_tokens - 1, the last sampled token never ran),
    else None. Null values (a response without routing) are skipped with a note."""
    found, nulls = [], []

    def walk(v, where):
        if isinstance(v, dict):
            if "routed_experts" in v:
                p, c = v.get("prompt_tokens"), v.get("completion_tokens")
                rows = p + c - 1 if (isinstance(p, int) and isinstance(c, int) and
                                     not isinstance(p, bool) and not isinstance(c, bool) and
                                     p + c >= 1) else None
                if v["routed_experts"] is not None:
                    found.append((f"{where}.routed_experts", v["routed_experts"], rows))
                else:
                    nulls.append(where)
                return
            for key, sub in v.items():
                if isinstance(sub, (dict, list)):
                    walk(sub, f"{where}.{key}")
        elif isinstance(v, list):
            if _is_numeric_3d(v):
                found.append((where, v, None))
                return
            for i, sub in enumerate(v):
                walk(sub, f"{where}[{i}]")

    for i, v in enumerate(_json_values(path)):
        walk(v, f"{path}:{i + 1}" if i else path)
    if nulls:
        print(f"moed-routing-import: note: {len(nulls)} response(s) in {path} carry no routing "
              f"(\"routed_experts\": null), left out: {', '.join(nulls[:3])}"
              f"{', ...' if len(nulls) > 3 else ''}", file=sys.stderr)
    if not found:
        raise SourceError(f"{path}: no \"routed_experts\" in it (vLLM: save "
                          "output.outputs[0].routed_experts; SGLang: send "
                          "\"return_routed_experts\": true to a server started with "
                          "--enable-return-routed-experts)")
    return found


# ------------------------------------------------------------------------------------------
# vLLM

def load_vllm(paths):
    """[(label, int array [T, L, k])] for each request found in the files."""
    out = []
    for path in paths:
        try:
            if path.endswith(".npy"):
                out.append((path, np.load(path, allow_pickle=False)))
            elif path.endswith(".npz"):
                with np.load(path, allow_pickle=False) as z:
                    out.extend((f"{path}:{name}", z[name]) for name in z.files)
            else:
                for label, v, _ in routed_experts_values(path):
                    if isinstance(v, str):
                        raise SourceError(f"{label}: a string (base64?): vLLM's routed_experts "
                                          "is an array; for SGLang's use the sglang command")
                    a = np.asarray(v)
                    if a.size == 0:  # a request without tokens ([] from .tolist())
                        continue
                    out.append((label, a))
        except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as e:
            raise SourceError(f"{path}: cannot read: {e}") from None
    for label, a in out:
        if a.ndim != 3 or not np.issubdtype(a.dtype, np.integer):
            raise SourceError(f"{label}: expected vLLM's routed_experts, int [tokens, "
                              f"num_hidden_layers, top_k]; got {a.dtype} {list(a.shape)}")
    return out


def concat_requests(reqs):
    shapes = {a.shape[1:] for _, a in reqs}
    if len(shapes) != 1:
        raise SourceError("the requests disagree on [layers, top_k]: " +
                          ", ".join(f"{label} {list(a.shape)}" for label, a in reqs))
    return np.concatenate([a for _, a in reqs], axis=0)


def convert_vllm(paths, opts):
    reqs = [(label, a) for label, a in load_vllm(paths) if a.shape[0] > 0]
    if not reqs:
        raise SourceError(f"{', '.join(paths)}: no tokens")
    arr = concat_requests(reqs)
    src = (f"vLLM routed_experts, {len(reqs)} request(s) from " +
           ", ".join(os.path.basename(p) for p in paths))
    return build_trace(paths[0] if len(paths) == 1 else "vllm", arr, opts, src, empty=0)


# ------------------------------------------------------------------------------------------
# torch.save files without torch: the zip layout (data.pkl + data/<key>) and a pickle reader
# that knows only tensors, storages and plain containers (it builds nothing else).

_STORAGES = {"DoubleStorage": "<f8", "FloatStorage": "<f4", "HalfStorage": "<f2",
             "BFloat16Storage": "bf16", "LongStorage": "<i8", "IntStorage": "<i4",
             "ShortStorage": "<i2", "CharStorage": "i1", "ByteStorage": "u1",
             "BoolStorage": "?"}


class _StorageType:
    def __init__(self, name):
        self.dtype = _STORAGES[name]


def _rebuild_tensor_v2(storage, offset, size, stride, *unused):
    """torch._utils._rebuild_tensor_v2 on a NumPy storage, every index checked."""
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    if len(size) != len(stride) or offset < 0 or any(s < 0 for s in size + stride):
        raise pickle.UnpicklingError("a tensor with a bad size or stride")
    if 0 in size:
        return np.zeros(size, dtype=storage.dtype)
    last = offset + sum((n - 1) * s for n, s in zip(size, stride))
    if last >= len(storage):
        raise pickle.UnpicklingError(f"a tensor reads element {last} of a storage of "
                                     f"{len(storage)}")
    view = np.lib.stride_tricks.as_strided(storage[offset:], shape=size,
                                           strides=[s * storage.itemsize for s in stride])
    return np.array(view)


def load_torch_zip(path):
    """A torch.save file (zip format, torch >= 1.6) as Python objects with NumPy arrays for
    tensors. Refuses anything but tensors and plain containers."""
    try:
        zf = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as e:
        raise SourceError(f"{path}: not a torch.save zip file ({e}); an older torch.save "
                          "format needs torch installed") from None
    with zf:
        pkls = [n for n in zf.namelist() if n == "data.pkl" or n.endswith("/data.pkl")]
        if len(pkls) != 1:
            raise SourceError(f"{path}: a zip file but not torch.save's (no single data.pkl)")
        prefix = pkls[0][:-len("data.pkl")]
        names = set(zf.namelist())
        if prefix + "byteorder" in names and zf.read(prefix + "byteorder").strip() != b"little":
            raise SourceError(f"{path}: written on a big-endian machine; load it with torch")
        storages = {}

        def storage(pid):
            if not isinstance(pid, tuple) or len(pid) != 5 or pid[0] != "storage" or \
                    not isinstance(pid[1], _StorageType):
                raise pickle.UnpicklingError(f"unknown persistent id {pid!r:.80}")
            key = str(pid[2])
            if key not in storages:
                entry = f"{prefix}data/{key}"
                if entry not in names:
                    raise pickle.UnpicklingError(f"storage {key} is not in the file")
                raw = zf.read(entry)
                if pid[1].dtype == "bf16":
                    u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
                    storages[key] = u.view(np.float32)
                else:
                    storages[key] = np.frombuffer(raw, dtype=pid[1].dtype)
            return storages[key]

        class Reader(pickle.Unpickler):
            def find_class(self, module, name):
                if module == "torch._utils" and name == "_rebuild_tensor_v2":
                    return _rebuild_tensor_v2
                if module == "torch" and name in _STORAGES:
                    return _StorageType(name)
                if module == "collections" and name == "OrderedDict":
                    return collections.OrderedDict
                raise pickle.UnpicklingError(f"refusing to build {module}.{name}")

            def persistent_load(self, pid):
                return storage(pid)

        try:
            with zf.open(pkls[0]) as f:
                return Reader(f).load()
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, zipfile.BadZipFile,
                zlib.error) as e:
            raise SourceError(f"{path}: cannot read this torch.save file without torch: "
                              f"{e}") from None


def _to_numpy(obj):
    """torch tensors inside containers -> NumPy arrays."""
    if hasattr(obj, "detach") and hasattr(obj, "numpy"):
        t = obj.detach().cpu()
        if str(t.dtype) == "torch.bfloat16":
            t = t.float()
        return t.numpy()
    if isinstance(obj, dict):
        return {k: _to_numpy(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_numpy(v) for v in obj)
    return obj


def load_torch(path, reader="auto"):
    """torch.load (weights only) when torch is importable and reader allows, else the
    built-in zip reader."""
    if reader in ("auto", "torch"):
        try:
            import torch
        except ImportError:
            if reader == "torch":
                raise SourceError("--reader torch: torch is not importable") from None
        else:
            try:
                obj = torch.load(path, map_location="cpu", weights_only=True)
            except Exception as e:  # torch raises many kinds; name the file and go on
                raise SourceError(f"{path}: torch.load failed: {e}") from None
            return _to_numpy(obj)
    return load_torch_zip(path)


# ------------------------------------------------------------------------------------------
# SGLang

def _sglang_records(path, dump):
    if not isinstance(dump, dict):
        raise SourceError(f"{path}: not an expert distribution recorder dump (a dict)")
    if "records" not in dump:
        if "logical_count" in dump:
            raise SourceError(f"{path}: a dump of mode stat (logical_count, totals only): "
                              "per-token routing needs --expert-distribution-recorder-mode "
                              "per_token")
        raise SourceError(f"{path}: no 'records': not an expert distribution recorder dump")
    recs = dump["records"]
    if not isinstance(recs, list):
        raise SourceError(f"{path}: 'records' is not a list")
    p2l = dump.get("last_physical_to_logical_map")
    return recs, (None if p2l is None else np.asarray(p2l))


def load_sglang_dump(path, reader="auto"):
    """[T, num_layers, 8] physical ids (-1: unwritten), per-record token counts, the map."""
    recs, p2l = _sglang_records(path, load_torch(path, reader))
    blocks, counts = [], []
    for i, rec in enumerate(recs):
        if not isinstance(rec, dict) or "topk_ids_of_layer" not in rec:
            raise SourceError(f"{path}: record {i} has no topk_ids_of_layer (mode per_token "
                              "writes it)")
        t = np.asarray(rec["topk_ids_of_layer"])
        if t.ndim != 3 or not np.issubdtype(t.dtype, np.integer):
            raise SourceError(f"{path}: record {i} topk_ids_of_layer is {t.dtype} "
                              f"{list(t.shape)}; expected int [layers, tokens, top_k slots]")
        n = len(rec["input_ids"]) if rec.get("input_ids") is not None else t.shape[1]
        if n != t.shape[1]:
            raise SourceError(f"{path}: record {i} has {n} input_ids but "
                              f"{t.shape[1]} rows of topk_ids_of_layer")
        if n == 0:
            continue  # an idle forward pass
        blocks.append(np.transpose(t, (1, 0, 2)))
        counts.append(n)
    if not blocks:
        raise SourceError(f"{path}: no tokens recorded (was recording started before the "
                          "requests: /start_expert_distribution_record?)")
    if len({b.shape[1:] for b in blocks}) != 1:
        raise SourceError(f"{path}: records disagree on [layers, slots]")
    return np.concatenate(blocks, axis=0), counts, p2l


def convert_sglang_dump(paths, opts, reader="auto"):
    arrs, counts, p2l = [], [], None
    for path in paths:
        a, c, m = load_sglang_dump(path, reader)
        arrs.append((path, a))
        counts.extend(c)
        p2l = m if m is not None else p2l
    arr = concat_requests(arrs)
    where = paths[0] if len(paths) == 1 else "sglang"
    # top_k: the slots written in a layer with experts; the rest of the 8 stay -1.
    valid = arr >= 0
    used = [l for l in range(arr.shape[1]) if valid[:, l, :].any()]
    if not used:
        raise SourceError(f"{where}: every slot is -1: no routing recorded")
    per_row = valid[:, used, :].sum(axis=2)
    k = int(per_row.max())
    bad = np.argwhere((per_row != k) | ~np.all(valid[:, used, :k], axis=2))
    if len(bad):
        r, li = (int(x) for x in bad[0])
        raise SourceError(f"{where}: token {r} of layer {used[li]} has {int(per_row[r, li])} "
                          f"experts in slots {arr[r, used[li]].tolist()}, other tokens {k} (a "
                          "padded token, or shared experts fused into the top-k: start SGLang "
                          "with --disable-shared-experts-fusion)")
    ids = arr[:, :, :k].astype(np.int64)
    if p2l is not None:
        if p2l.ndim != 2 or p2l.shape[0] != arr.shape[1]:
            raise SourceError(f"{where}: last_physical_to_logical_map is {list(p2l.shape)}; "
                              f"expected [{arr.shape[1]} layers, physical experts]")
        for l in used:
            col = ids[:, l, :]
            if col.max() >= p2l.shape[1]:
                raise SourceError(f"{where}: layer {l} names physical expert {int(col.max())}; "
                                  f"the map has {p2l.shape[1]}")
            ids[:, l, :] = p2l[l][col]
        if opts.num_experts is None and opts.config is None:
            opts = Options(**{**vars(opts), "num_experts": int(p2l.max()) + 1})
    ids[~valid[:, :, :k]] = -1
    natural = counts[0] if len(set(counts)) == 1 else 0
    src = (f"SGLang expert distribution recorder (per_token), {len(counts)} forward passes "
           "from " + ", ".join(os.path.basename(p) for p in paths))
    return build_trace(where, ids, opts, src, empty=-1, natural_step=natural)


def _decode_sglang_value(label, v, num_layers, top_k):
    if isinstance(v, str):
        try:
            raw = base64.b64decode(v.encode("ascii"), validate=True)
        except (binascii.Error, ValueError, UnicodeEncodeError):
            raise SourceError(f"{label}: not base64") from None
        if len(raw) % 4:
            raise SourceError(f"{label}: {len(raw)} bytes, not whole int32 values")
        flat = np.frombuffer(raw, dtype="<i4")
    else:
        flat = np.asarray(v).reshape(-1)
        if not np.issubdtype(flat.dtype, np.integer):
            raise SourceError(f"{label}: expected expert ids (integers), got {flat.dtype}")
    per_token = num_layers * top_k
    if flat.size % per_token:
        raise SourceError(f"{label}: {flat.size} expert ids are not whole tokens of "
                          f"{num_layers} layers x {top_k} (check --num-layers / --top-k / "
                          "--config)")
    return flat.reshape(-1, num_layers, top_k)


def convert_sglang_json(paths, opts):
    cfg = opts.config
    cfg_L = cfg.get("num_hidden_layers") if cfg is not None else None
    cfg_k = top_k_of(cfg) if cfg is not None else None
    for what, given, known in (("--num-layers", opts.num_layers, cfg_L),
                               ("--top-k", opts.top_k, cfg_k)):
        if given and known and given != known:  # the flat ids cut wrong: refused
            raise SourceError(f"{what} {given}, but the config says {known}")
    L = opts.num_layers or cfg_L
    k = opts.top_k or cfg_k
    if not L or not k:
        raise SourceError("SGLang's routed_experts are flat int32 [tokens x num_hidden_layers "
                          "x top_k]: give --config MODEL/config.json, or --num-layers and "
                          "--top-k")
    reqs = []
    for path in paths:
        for label, v, rows in routed_experts_values(path):
            a = _decode_sglang_value(label, v, L, k)
            if rows is not None and a.shape[0] != rows:
                raise SourceError(f"{label}: {a.shape[0]} tokens of {L} layers x top-{k}, but "
                                  f"the response ran {rows} (prompt_tokens + "
                                  "completion_tokens - 1): check --num-layers / --top-k / "
                                  "--config")
            if a.shape[0]:
                reqs.append((label, a))
    if not reqs:
        raise SourceError(f"{', '.join(paths)}: no tokens")
    arr = concat_requests(reqs)
    src = (f"SGLang return_routed_experts, {len(reqs)} request(s) from " +
           ", ".join(os.path.basename(p) for p in paths))
    return build_trace(paths[0] if len(paths) == 1 else "sglang", arr, opts, src, empty=0)


def is_torch_file(path):
    with open(path, "rb") as f:
        head = f.read(4)
    return head[:2] == b"PK" or head[:1] == b"\x80"  # zip, or an old pickle-based torch.save
