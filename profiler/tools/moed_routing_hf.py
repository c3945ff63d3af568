"""Hugging Face transformers: run a model over tokens and record, layer by layer, the experts
each token went to and their weights, as a moed-routing/1 trace (docs/routing.md, "Import").

The recorder takes what the model itself computed, in this order of preference, per layer:
 1. the arguments of the MoE block's experts module: transformers 5 calls
    `self.experts(hidden_states, top_k_index, top_k_weights)` in every family
    (modeling_mixtral.py MixtralSparseMoeBlock.forward, modeling_deepseek_v2.py
    DeepseekV2Moe.forward, ...), gpt-oss 4.5x `self.experts(hidden_states,
    router_indices=..., routing_weights=...)` with dense [tokens, experts] weights;
 2. the result of the block's `route_tokens_to_experts(router_logits)` where it has one
    (modeling_deepseek_v2.py / modeling_deepseek_v3.py): (topk_indices, topk_weights);
 3. the output of the gate (`block.gate`, gpt-oss `block.router`): a tuple holding the ids
    (DeepseekV3TopkRouter.forward in 4.5x: (topk_indices, topk_weights); DeepSeek's own
    MoEGate: (topk_idx, topk_weight, aux_loss); GptOssTopKRouter.forward in 4.5x:
    (router_scores [tokens, experts], router_indices); the 5.x TopKRouters: (router_logits,
    router_scores, router_indices)), or only the logits (4.x nn.Linear gates of Mixtral and
    Qwen: MixtralSparseMoeBlock.forward / Qwen2MoeSparseMoeBlock.forward /
    Qwen3MoeSparseMoeBlock.forward then route in the block; the same routing is redone here
    with the same torch calls, see route_from_logits).
The first whose rows add up to the tokens run is kept.
"""

import torch
import torch.nn.functional as F

import moed_routing as mr
import moed_routing_sources as srcs

_ID_NAMES = ("top_k_index", "router_indices", "topk_indices", "topk_ids", "top_k_indices",
             "selected_experts")
_WEIGHT_NAMES = ("top_k_weights", "routing_weights", "topk_weights", "router_scores",
                 "top_k_scores")
KINDS = ("experts", "route", "gate")
KIND_NAMES = {"experts": "the experts' inputs", "route": "route_tokens_to_experts",
              "gate": "the gate's output"}


def _is_ids(t):
    return torch.is_tensor(t) and not t.is_floating_point() and t.dtype != torch.bool and \
        not t.is_complex()


def decoder_layers(model):
    """The model's decoder layers (an nn.ModuleList), wherever the architecture keeps them."""
    for path in ("model.layers", "model.language_model.layers", "language_model.model.layers",
                 "model.decoder.layers", "transformer.h", "layers"):
        obj = model
        for part in path.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                break
        if isinstance(obj, torch.nn.ModuleList):
            return obj
    raise srcs.SourceError(f"{type(model).__name__}: cannot find its decoder layers "
                           "(model.layers)")


def moe_blocks(model):
    """[(decoder layer index, MoE block)]: layers whose MLP has a gate (or router) and
    experts; dense layers are left out."""
    out = []
    for i, layer in enumerate(decoder_layers(model)):
        for name in ("block_sparse_moe", "mlp", "feed_forward", "moe"):
            block = getattr(layer, name, None)
            if block is None:
                continue
            gate = getattr(block, "gate", None)
            if gate is None:
                gate = getattr(block, "router", None)
            if gate is not None and getattr(block, "experts", None) is not None:
                out.append((i, block))
                break
    return out


def _cfg(block, cfg, *names, default=None):
    for n in names:
        v = getattr(block, n, None)
        if v is not None:
            return v
        if n in cfg and cfg[n] is not None:
            return cfg[n]
    return default


def route_from_logits(family, block, cfg, logits, dtype):
    """The routing a 4.x block does with its gate's logits, with the same torch calls as the
    modeling file (cited per family). Returns (ids [T, k], weights [T, k])."""
    logits = logits.reshape(-1, logits.shape[-1])
    k = int(_cfg(block, cfg, "top_k", "num_experts_per_tok", "experts_per_token"))
    if family == "mixtral":
        # modeling_mixtral.py MixtralSparseMoeBlock.forward (4.x)
        w = F.softmax(logits, dim=1, dtype=torch.float)
        w, idx = torch.topk(w, k, dim=-1)
        w /= w.sum(dim=-1, keepdim=True)
        return idx, w.to(dtype)
    if family in ("qwen2_moe", "qwen3_moe"):
        # modeling_qwen2_moe.py Qwen2MoeSparseMoeBlock.forward, modeling_qwen3_moe.py
        # Qwen3MoeSparseMoeBlock.forward (4.x)
        w = F.softmax(logits, dim=1, dtype=torch.float)
        w, idx = torch.topk(w, k, dim=-1)
        if _cfg(block, cfg, "norm_topk_prob", default=False):
            w /= w.sum(dim=-1, keepdim=True)
        return idx, w.to(dtype)
    if family == "deepseek_v2":
        # modeling_deepseek_v2.py DeepseekV2Moe.route_tokens_to_experts
        p = logits.softmax(dim=-1, dtype=torch.float32)
        if _cfg(block, cfg, "topk_method", default="greedy") == "group_limited_greedy":
            g = int(_cfg(block, cfg, "num_group", "n_group"))
            kg = int(_cfg(block, cfg, "topk_group"))
            group_scores = p.view(p.shape[0], g, -1).max(dim=-1).values
            group_idx = torch.topk(group_scores, k=kg, dim=-1, sorted=False)[1]
            mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
            mask = mask.unsqueeze(-1).expand(p.shape[0], g, p.shape[1] // g).reshape(p.shape[0], -1)
            p = p.masked_fill(~mask.bool(), 0.0)
        w, idx = torch.topk(p, k=k, dim=-1, sorted=False)
        return idx, w * float(_cfg(block, cfg, "routed_scaling_factor", default=1.0))
    if family == "deepseek_v3":
        # modeling_deepseek_v3.py DeepseekV3MoE.route_tokens_to_experts (5.x) /
        # DeepseekV3TopkRouter.get_topk_indices and forward (4.5x)
        s = logits.sigmoid()
        gate = getattr(block, "gate", None)
        bias = getattr(gate, "e_score_correction_bias", None)
        choice = s + bias if bias is not None else s
        e = s.shape[1]
        g = int(_cfg(block, cfg, "n_group", default=1))
        kg = int(_cfg(block, cfg, "topk_group", default=1))
        group_scores = choice.view(-1, g, e // g).topk(2 if e // g >= 2 else 1, dim=-1)[0].sum(dim=-1)
        group_idx = torch.topk(group_scores, k=kg, dim=-1, sorted=False)[1]
        mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
        mask = mask.unsqueeze(-1).expand(-1, g, e // g).reshape(-1, e)
        choice = choice.masked_fill(~mask.bool(), 0.0)
        idx = torch.topk(choice, k=k, dim=-1, sorted=False)[1]
        w = s.gather(1, idx)
        if _cfg(block, cfg, "norm_topk_prob", default=False):
            w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
        return idx, w * float(_cfg(block, cfg, "routed_scaling_factor", default=1.0))
    if family == "gpt_oss":
        # modeling_gpt_oss.py GptOssTopKRouter.forward (logits include the router bias)
        top, idx = torch.topk(logits, k, dim=-1)
        return idx, F.softmax(top, dim=1, dtype=top.dtype)
    raise srcs.SourceError(f"no routing known for family {family!r}")


class LayerCapture:
    """The hooks on one MoE block and what each saw, per forward pass."""

    def __init__(self, layer, block, family, cfg, num_experts):
        self.layer, self.block, self.family, self.cfg = layer, block, family, cfg
        self.num_experts = num_experts
        self.seen = {kind: [] for kind in KINDS}
        self.handles = []
        self.wrapped_route = False

    def _keep(self, kind, ids, weights):
        ids = ids.detach().to("cpu", torch.int64)
        ids = ids.reshape(-1, ids.shape[-1])
        w = None
        if weights is not None:
            w = weights.detach().to("cpu", torch.float32)
            w = w.reshape(-1, w.shape[-1])
            if w.shape[0] != ids.shape[0]:
                return
            if w.shape[1] != ids.shape[1]:
                if w.shape[1] != self.num_experts:
                    return
                w = w.gather(1, ids)  # dense [tokens, experts] scores: the chosen ones
        self.seen[kind].append((ids, w))

    def _take_tuple(self, kind, out):
        ts = [t for t in out if torch.is_tensor(t)]
        ids = [t for t in ts if _is_ids(t) and t.dim() >= 1]
        if len(ids) != 1:
            return
        ids = ids[0]
        k = ids.shape[-1]
        rows = ids.numel() // max(k, 1)
        floats = [t for t in ts if t.is_floating_point() and t.dim() >= 1 and t.shape[-1] and
                  t.numel() // t.shape[-1] == rows]
        exact = [t for t in floats if t.shape[-1] == k]
        dense = [t for t in floats if t.shape[-1] == self.num_experts]
        self._keep(kind, ids, exact[-1] if exact else (dense[-1] if dense else None))

    def _experts_pre(self, module, args, kwargs):
        ids = next((kwargs[n] for n in _ID_NAMES if n in kwargs), None)
        w = next((kwargs[n] for n in _WEIGHT_NAMES if n in kwargs), None)
        if ids is None and len(args) > 1:
            ids = args[1]
        if w is None and len(args) > 2:
            w = args[2]
        if _is_ids(ids) and torch.is_tensor(w) and w.is_floating_point():
            self._keep("experts", ids, w)

    def _gate_post(self, module, args, out):
        if isinstance(out, (tuple, list)):
            self._take_tuple("gate", out)
        elif torch.is_tensor(out) and out.is_floating_point() and out.shape[-1] == self.num_experts:
            dtype = args[0].dtype if args and torch.is_tensor(args[0]) else out.dtype
            ids, w = route_from_logits(self.family, self.block, self.cfg, out.detach(), dtype)
            self._keep("gate", ids, w)

    def install(self):
        # A plain nn.ModuleList of experts is never called, so its hook never fires; some
        # releases subclass it with a forward(hidden_states, top_k_index, top_k_weights).
        experts = self.block.experts
        try:
            self.handles.append(experts.register_forward_pre_hook(self._experts_pre,
                                                                  with_kwargs=True))
        except TypeError:  # torch < 2.0: no kwargs for pre-hooks
            self.handles.append(experts.register_forward_pre_hook(
                lambda m, a: self._experts_pre(m, a, {})))
        route = getattr(self.block, "route_tokens_to_experts", None)
        if callable(route):
            def wrapped(*a, **kw):
                out = route(*a, **kw)
                if isinstance(out, (tuple, list)):
                    self._take_tuple("route", out)
                return out
            self.block.route_tokens_to_experts = wrapped
            self.wrapped_route = True
        gate = getattr(self.block, "gate", None)
        if gate is None:
            gate = getattr(self.block, "router", None)
        self.handles.append(gate.register_forward_hook(self._gate_post))

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []
        if self.wrapped_route:
            del self.block.route_tokens_to_experts
            self.wrapped_route = False

    def result(self, tokens):
        """(ids, weights, kind) from the first source that saw every token."""
        for kind in KINDS:
            seen = self.seen[kind]
            if seen and sum(i.shape[0] for i, _ in seen) == tokens and \
                    len({i.shape[1] for i, _ in seen}) == 1:
                ids = torch.cat([i for i, _ in seen]).numpy()
                ws = [w for _, w in seen]
                w = None if any(x is None for x in ws) else torch.cat(ws).numpy()
                return ids, w, kind
        got = ", ".join(f"{KIND_NAMES[k]}: {sum(i.shape[0] for i, _ in self.seen[k])} rows"
                        for k in KINDS)
        raise srcs.SourceError(f"layer {self.layer}: the hooks did not see the routing of "
                               f"all {tokens} tokens ({got}); this model's MoE block is "
                               "laid out in a way the recorder does not know")


def config_dict(model):
    cfg = model.config.to_dict()
    text = cfg.get("text_config")
    if isinstance(text, dict):
        cfg = {**text, "model_type": cfg.get("model_type"),
               "architectures": cfg.get("architectures")}
    return cfg


def record(model, input_ids, family=None, layers=None, chunk=0, tokens_per_step=0, source=""):
    """Runs the model over input_ids (a list of ints) in one forward pass, or in chunks of
    `chunk` tokens with its KV cache, and returns the moed_routing.Trace of its MoE layers
    (all, or `layers`)."""
    cfg = config_dict(model)
    family = family or srcs.family_of(cfg)
    if family not in srcs.FAMILIES:
        raise srcs.SourceError(f"model_type {cfg.get('model_type')!r} is none of moed's "
                               f"families ({', '.join(srcs.FAMILIES)}); --family names one")
    e = srcs.num_experts_of(cfg)
    if e is None:
        raise srcs.SourceError("the model config has no expert count (num_local_experts, "
                               "num_experts or n_routed_experts)")
    blocks = moe_blocks(model)
    if not blocks:
        raise srcs.SourceError(f"{type(model).__name__}: no decoder layer has a MoE block "
                               "(a gate or router and experts)")
    if layers is not None:
        have = {i for i, _ in blocks}
        missing = [l for l in layers if l not in have]
        if missing:
            raise srcs.SourceError(f"layers {missing} have no MoE block; the model's MoE "
                                   f"layers are {sorted(have)}")
        blocks = [(i, b) for i, b in blocks if i in set(layers)]
    n = len(input_ids)
    if n < 1:
        raise srcs.SourceError("no tokens to run")
    caps = [LayerCapture(i, b, family, cfg, e) for i, b in blocks]
    was_training = model.training
    model.eval()
    try:
        for c in caps:
            c.install()
        device = next(model.parameters()).device
        with torch.no_grad():
            if chunk <= 0 or chunk >= n:
                model(input_ids=torch.tensor([input_ids], device=device), use_cache=False)
            else:
                past = None
                for s in range(0, n, chunk):
                    out = model(input_ids=torch.tensor([input_ids[s:s + chunk]], device=device),
                                past_key_values=past, use_cache=True)
                    past = getattr(out, "past_key_values", None)
    finally:
        for c in caps:
            c.remove()
        model.train(was_training)
    ids, wts, kinds = {}, {}, set()
    k, uniform = None, False
    for c in caps:
        i, w, kind = c.result(n)
        uniform = uniform or w is None
        kinds.add(KIND_NAMES[kind])
        if k is not None and i.shape[1] != k:
            raise srcs.SourceError(f"layer {c.layer} routes to {i.shape[1]} experts, layer "
                                   f"{caps[0].layer} to {k}")
        k = i.shape[1]
        ids[c.layer] = i.astype("int32")
        wts[c.layer] = mr.uniform_weights(n, k) if w is None else w.astype("float32")
    src = f"{source}, {n} tokens, recorded from {', '.join(sorted(kinds))}".lstrip(", ")
    trace = mr.Trace([c.layer for c in caps], ids, wts, e, k, tokens_per_step, family,
                     src[:500], uniform)
    try:
        mr.check(trace)
    except mr.TraceError as err:
        raise srcs.SourceError(f"the recorded routing is not a valid trace: {err}") from None
    return trace
