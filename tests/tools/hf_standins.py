"""Small torch models shaped as transformers' MoE blocks have been, one per layout the
recorder (profiler/tools/moed_routing_hf.py) must read, for tools.import_hf_hooks on
machines with torch but not transformers. Each block keeps in .truth the ids and weights it
really used, to compare with what the recorder wrote. The routing math and the calls are
those of the cited transformers classes; the experts are small linears."""

import inspect
import types

import torch
import torch.nn.functional as F
from torch import nn

H, E, K = 16, 8, 2


class Config:
    def __init__(self, **kw):
        self.__dict__.update(kw)

    def to_dict(self):
        return dict(self.__dict__)


def _mix(experts, x, idx, w):
    out = torch.zeros_like(x)
    for e in range(len(experts) if isinstance(experts, nn.ModuleList) else E):
        rows, col = torch.where(idx == e)
        if len(rows):
            y = experts[e](x[rows]) if isinstance(experts, nn.ModuleList) else x[rows] * (e + 1)
            out.index_add_(0, rows, y * w[rows, col, None])
    return out


class MixtralBlock4(nn.Module):
    """modeling_mixtral.py MixtralSparseMoeBlock (4.x): nn.Linear gate returning logits, the
    routing in the block, experts an nn.ModuleList."""

    def __init__(self):
        super().__init__()
        self.top_k = K
        self.gate = nn.Linear(H, E, bias=False)
        self.experts = nn.ModuleList([nn.Linear(H, H, bias=False) for _ in range(E)])
        self.truth = []

    def forward(self, hidden_states):
        b, s, h = hidden_states.shape
        x = hidden_states.view(-1, h)
        router_logits = self.gate(x)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected = torch.topk(routing_weights, self.top_k, dim=-1)
        routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.to(x.dtype)
        self.truth.append((selected, routing_weights))
        return _mix(self.experts, x, selected, routing_weights).view(b, s, h), router_logits


class Qwen2Block4(MixtralBlock4):
    """modeling_qwen2_moe.py Qwen2MoeSparseMoeBlock (4.x): as Mixtral, renormalised only with
    norm_topk_prob (False here), plus a gated shared expert."""

    def __init__(self):
        super().__init__()
        self.norm_topk_prob = False
        self.shared_expert = nn.Linear(H, H, bias=False)
        self.shared_expert_gate = nn.Linear(H, 1, bias=False)

    def forward(self, hidden_states):
        b, s, h = hidden_states.shape
        x = hidden_states.view(-1, h)
        router_logits = self.gate(x)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected = torch.topk(routing_weights, self.top_k, dim=-1)
        if self.norm_topk_prob:
            routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.to(x.dtype)
        self.truth.append((selected, routing_weights))
        out = _mix(self.experts, x, selected, routing_weights)
        out = out + torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        return out.view(b, s, h), router_logits


class Experts5(nn.Module):
    """The 5.x experts module: forward(hidden_states, top_k_index, top_k_weights)
    (modeling_mixtral.py MixtralExperts, modeling_deepseek_v2.py DeepseekV2Experts)."""

    def forward(self, hidden_states, top_k_index, top_k_weights):
        return _mix(None, hidden_states, top_k_index, top_k_weights)


class MixtralRouter5(nn.Module):
    """modeling_mixtral.py MixtralTopKRouter (5.x): (router_logits, router_scores,
    router_indices)."""

    def __init__(self):
        super().__init__()
        self.top_k, self.hidden_dim = K, H
        self.weight = nn.Parameter(torch.randn(E, H))

    def forward(self, hidden_states):
        hidden_states = hidden_states.reshape(-1, self.hidden_dim)
        router_logits = F.linear(hidden_states, self.weight)
        router_probs = torch.nn.functional.softmax(router_logits.float(), dim=-1)
        router_top_value, router_indices = torch.topk(router_probs, self.top_k, dim=-1)
        router_top_value /= router_top_value.sum(dim=-1, keepdim=True)
        return router_logits, router_top_value, router_indices


class MixtralBlock5(nn.Module):
    """modeling_mixtral.py MixtralSparseMoeBlock (5.x)."""

    def __init__(self):
        super().__init__()
        self.top_k = K
        self.gate = MixtralRouter5()
        self.experts = Experts5()
        self.truth = []

    def forward(self, hidden_states):
        b, s, h = hidden_states.shape
        x = hidden_states.view(-1, h)
        _, top_k_weights, top_k_index = self.gate(x)
        self.truth.append((top_k_index, top_k_weights))
        return self.experts(x, top_k_index, top_k_weights).view(b, s, h)


class DeepseekV3Gate4(nn.Module):
    """modeling_deepseek_v3.py DeepseekV3TopkRouter (4.5x): forward returns (topk_indices,
    topk_weights), sigmoid scores, correction bias, group-limited choice."""

    def __init__(self, n_group=4, topk_group=2):
        super().__init__()
        self.top_k, self.n_routed_experts = K, E
        self.routed_scaling_factor, self.norm_topk_prob = 2.5, True
        self.n_group, self.topk_group = n_group, topk_group
        self.weight = nn.Parameter(torch.randn(E, H))
        self.register_buffer("e_score_correction_bias", torch.rand(E) * 0.15)

    @torch.no_grad()
    def get_topk_indices(self, scores):
        scores_for_choice = scores.view(-1, self.n_routed_experts) + \
            self.e_score_correction_bias.unsqueeze(0)
        group_scores = (scores_for_choice.view(-1, self.n_group,
                                               self.n_routed_experts // self.n_group)
                        .topk(2, dim=-1)[0].sum(dim=-1))
        group_idx = torch.topk(group_scores, k=self.topk_group, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores)
        group_mask.scatter_(1, group_idx, 1)
        score_mask = (group_mask.unsqueeze(-1)
                      .expand(-1, self.n_group, self.n_routed_experts // self.n_group)
                      .reshape(-1, self.n_routed_experts))
        scores_for_choice = scores_for_choice.masked_fill(~score_mask.bool(), 0.0)
        return torch.topk(scores_for_choice, k=self.top_k, dim=-1, sorted=False)[1]

    def forward(self, hidden_states):
        hidden_states = hidden_states.view(-1, H)
        router_logits = F.linear(hidden_states.type(torch.float32),
                                 self.weight.type(torch.float32))
        scores = router_logits.sigmoid()
        topk_indices = self.get_topk_indices(scores)
        topk_weights = scores.gather(1, topk_indices)
        if self.norm_topk_prob:
            topk_weights /= topk_weights.sum(dim=-1, keepdim=True) + 1e-20
        topk_weights = topk_weights * self.routed_scaling_factor
        return topk_indices, topk_weights


class DeepseekV3Block4(nn.Module):
    """modeling_deepseek_v3.py DeepseekV3MoE (4.5x): experts an nn.ModuleList."""

    def __init__(self):
        super().__init__()
        self.top_k = K
        self.gate = DeepseekV3Gate4()
        self.experts = nn.ModuleList([nn.Linear(H, H, bias=False) for _ in range(E)])
        self.shared_experts = nn.Linear(H, H, bias=False)
        self.truth = []

    def forward(self, hidden_states):
        b, s, h = hidden_states.shape
        topk_indices, topk_weights = self.gate(hidden_states)
        self.truth.append((topk_indices, topk_weights))
        x = hidden_states.view(-1, h)
        out = _mix(self.experts, x, topk_indices, topk_weights.to(x.dtype))
        return (out + self.shared_experts(x)).view(b, s, h)


class DeepseekV2Block5(nn.Module):
    """modeling_deepseek_v2.py DeepseekV2Moe (5.x): the gate's weight used through
    F.linear (the gate module is never called), route_tokens_to_experts, Experts5."""

    def __init__(self):
        super().__init__()
        self.top_k, self.routed_scaling_factor = K, 2.0
        self.experts = Experts5()
        self.gate = nn.Linear(H, E, bias=False)
        self.truth = []

    def route_tokens_to_experts(self, router_logits):
        router_logits = router_logits.view(-1, E).softmax(dim=-1, dtype=torch.float32)
        topk_weight, topk_idx = torch.topk(router_logits, k=self.top_k, dim=-1, sorted=False)
        return topk_idx, topk_weight * self.routed_scaling_factor

    def forward(self, hidden_states):
        orig_shape = hidden_states.shape
        router_logits = nn.functional.linear(hidden_states.type(torch.float32),
                                             self.gate.weight.type(torch.float32))
        topk_indices, topk_weights = self.route_tokens_to_experts(router_logits)
        self.truth.append((topk_indices, topk_weights))
        x = hidden_states.view(-1, hidden_states.shape[-1])
        return self.experts(x, topk_indices, topk_weights).view(*orig_shape)


class GptOssRouter4(nn.Module):
    """modeling_gpt_oss.py GptOssTopKRouter (4.5x): (router_scores [tokens, experts] dense,
    router_indices)."""

    def __init__(self):
        super().__init__()
        self.top_k, self.hidden_dim = K, H
        self.weight = nn.Parameter(torch.randn(E, H))
        self.bias = nn.Parameter(torch.randn(E))

    def forward(self, hidden_states):
        hidden_states = hidden_states.reshape(-1, self.hidden_dim)
        router_logits = F.linear(hidden_states, self.weight, self.bias)
        router_top_value, router_indices = torch.topk(router_logits, self.top_k, dim=-1)
        router_top_value = torch.nn.functional.softmax(router_top_value, dim=1,
                                                       dtype=router_top_value.dtype)
        router_scores = torch.zeros_like(router_logits).scatter_(1, router_indices,
                                                                 router_top_value)
        return router_scores, router_indices


class GptOssExperts4(nn.Module):
    """modeling_gpt_oss.py GptOssExperts.forward(hidden_states, router_indices=None,
    routing_weights=None) (4.5x), called with keywords."""

    def forward(self, hidden_states, router_indices=None, routing_weights=None):
        x = hidden_states.reshape(-1, H)
        w = routing_weights.gather(1, router_indices)
        return _mix(None, x, router_indices, w).view(hidden_states.shape)


class GptOssBlock4(nn.Module):
    """modeling_gpt_oss.py GptOssMLP (4.5x)."""

    def __init__(self):
        super().__init__()
        self.top_k = K
        self.router = GptOssRouter4()
        self.experts = GptOssExperts4()
        self.truth = []

    def forward(self, hidden_states):
        router_scores, router_indices = self.router(hidden_states)
        self.truth.append((router_indices, router_scores.gather(1, router_indices)))
        return self.experts(hidden_states, router_indices=router_indices,
                            routing_weights=router_scores), router_scores


class DenseMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj = nn.Linear(H, H, bias=False)
        self.down_proj = nn.Linear(H, H, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)))


class Layer(nn.Module):
    def __init__(self, mlp, attr="mlp"):
        super().__init__()
        self.post_attention_layernorm = nn.LayerNorm(H)
        self.attr = attr
        setattr(self, attr, mlp)

    def forward(self, x):
        y = getattr(self, self.attr)(self.post_attention_layernorm(x))
        return x + (y[0] if isinstance(y, tuple) else y)


class Model(nn.Module):
    def __init__(self, config, layers):
        super().__init__()
        self.config = config
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(64, H)
        self.model.layers = nn.ModuleList(layers)

    def forward(self, input_ids=None, past_key_values=None, use_cache=False, **kw):
        x = self.model.embed_tokens(input_ids)
        for layer in self.model.layers:
            x = layer(x)
        return types.SimpleNamespace(logits=x, past_key_values=None)


def _cfg(model_type, **kw):
    base = dict(model_type=model_type, num_hidden_layers=3, hidden_size=H,
                num_experts_per_tok=K)
    base.update(kw)
    return Config(**base)


MODELS = [
    ("mixtral 4.x", "mixtral", lambda: Model(_cfg("mixtral", num_local_experts=E),
                                             [Layer(MixtralBlock4(), "block_sparse_moe")
                                              for _ in range(3)])),
    ("qwen2_moe 4.x", "qwen2_moe", lambda: Model(_cfg("qwen2_moe", num_experts=E,
                                                      norm_topk_prob=False),
                                                 [Layer(DenseMLP()), Layer(Qwen2Block4()),
                                                  Layer(Qwen2Block4())])),
    ("mixtral 5.x", "mixtral", lambda: Model(_cfg("mixtral", num_local_experts=E),
                                             [Layer(MixtralBlock5()) for _ in range(3)])),
    ("deepseek_v3 4.5x", "deepseek_v3", lambda: Model(_cfg("deepseek_v3", n_routed_experts=E),
                                                      [Layer(DenseMLP()),
                                                       Layer(DeepseekV3Block4()),
                                                       Layer(DeepseekV3Block4())])),
    ("kimi_k2 4.5x", "deepseek_v3", lambda: Model(_cfg("kimi_k2", n_routed_experts=E),
                                                  [Layer(DenseMLP()), Layer(DeepseekV3Block4()),
                                                   Layer(DenseMLP())])),
    ("deepseek_v2 5.x", "deepseek_v2", lambda: Model(_cfg("deepseek_v2", n_routed_experts=E),
                                                     [Layer(DenseMLP()),
                                                      Layer(DeepseekV2Block5()),
                                                      Layer(DeepseekV2Block5())])),
    ("gpt_oss 4.5x", "gpt_oss", lambda: Model(_cfg("gpt_oss", num_local_experts=E),
                                              [Layer(GptOssBlock4()) for _ in range(3)])),
]

# What the recorder should have read each from (its source metadata says). gpt-oss 4.5x
# passes the routing to its experts by keyword, which pre-hooks see from torch 2.0 on.
_KW_HOOKS = "with_kwargs" in inspect.signature(nn.Module.register_forward_pre_hook).parameters
EXPECT_KIND = {"mixtral 4.x": "the gate's output", "qwen2_moe 4.x": "the gate's output",
               "mixtral 5.x": "the experts' inputs", "deepseek_v3 4.5x": "the gate's output",
               "kimi_k2 4.5x": "the gate's output",
               "deepseek_v2 5.x": "the experts' inputs", "gpt_oss 4.5x": "the experts' inputs" if _KW_HOOKS else "the gate's output"}


def layer_blocks(model):
    out = []
    for i, layer in enumerate(model.model.layers):
        b = getattr(layer, layer.attr)
        if hasattr(b, "truth"):
            out.append((i, b))
    return out


def blocks(model):
    return [b for _, b in layer_blocks(model)]


class OpaqueBlock(nn.Module):
    """Routes inline: the gate's weight through F.linear, experts an nn.ModuleList, no
    route_tokens_to_experts: nothing a hook can see."""

    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(H, E, bias=False)
        self.experts = nn.ModuleList([nn.Linear(H, H) for _ in range(E)])

    def forward(self, x):
        logits = F.linear(x, self.gate.weight)
        return x + 0 * logits.sum()


def opaque_model():
    return Model(_cfg("mixtral", num_local_experts=E), [Layer(OpaqueBlock())])


# A stand-in `transformers` package for the CLI's wiring (moed-routing-import hf) where the
# real one is missing: put FAKE_TRANSFORMERS in a folder named transformers on PYTHONPATH.
FAKE_TRANSFORMERS = '''
import json, os, sys
import torch
sys.path.insert(0, os.environ["MOED_STANDINS"])
import hf_standins as st
__version__ = "0-standin"

class AutoConfig:
    @staticmethod
    def from_pretrained(path, trust_remote_code=False):
        with open(os.path.join(path, "config.json")) as f:
            return st.Config(**json.load(f))

class AutoModelForCausalLM:
    @staticmethod
    def from_pretrained(path, torch_dtype=None, trust_remote_code=False):
        with open(os.path.join(path, "config.json")) as f:
            name = json.load(f)["standin"]
        return st.build_seeded(name)

class AutoTokenizer:
    @staticmethod
    def from_pretrained(path, trust_remote_code=False):
        return lambda text: {"input_ids": [ord(c) % 50 for c in text]}
'''


def build_seeded(name):
    torch.manual_seed(1234)
    return dict((n, b) for n, _, b in MODELS)[name]()
