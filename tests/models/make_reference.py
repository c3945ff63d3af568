#!/usr/bin/env python3
"""make_reference.py OUTDIR FAMILY DTYPE [--shards N] [--tokens T] [--seed S] [--layers L,L]
                     [--experts E] [--hidden H] [--ffn F] [--moe-layers N] [--hf-defaults]

Writes a tiny Hugging Face checkpoint directory of FAMILY in the real on-disk layout
(config.json, sharded safetensors + index, dense and attention tensors to ignore), the test
input DIR/input.safetensors (`input` [T, H] F32) and the expected output
DIR/expected.safetensors (`output` [T, H] F32): x after x = x + moe_block_l(x) for each chosen
MoE layer, computed in float64 from the weights AS STORED (rounded to DTYPE, FP8 and MXFP4
dequantised).

FAMILY: mixtral qwen2_moe qwen3_moe deepseek_v2 deepseek_v2_group deepseek_v3 kimi_k2 gpt_oss
DTYPE:  f32 bf16 f16 fp8 mxfp4 (fp8: DeepSeek-V3 convention, F8_E4M3 + 128x128-block
        _scale_inv; mxfp4: gpt-oss's release, the experts' fused tensors as U8 _blocks of e2m1
        pairs + _scales of e8m0, the OCP Microscaling Formats (MX) v1.0 specification, the
        rest BF16)

The routing and expert math follow Hugging Face transformers' modeling files (cited at each
function); no code is shared with moed. Only numpy + the standard library.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np

FAMILIES = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v2_group",
            "deepseek_v3", "kimi_k2", "gpt_oss")
DTYPES = ("f32", "bf16", "f16", "fp8", "mxfp4")
MX_BLOCK = 32  # OCP MX v1.0: k = 32 elements share one scale
FP8_BLOCK = 128
FP8_MAX = 448.0
GPT_OSS_ALPHA = 1.702

# --------------------------------------------------------------------------------------------
# Number formats. Each rounding returns (raw little-endian bytes, the stored value as float64),
# so the reference always computes from exactly what the file holds.


def bf16_bits(a):
    """float -> bfloat16 bits, round to nearest even (the top 16 bits of the F32 pattern)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounding = ((u >> 16) & 1) + 0x7FFF
    return ((u + rounding) >> 16).astype(np.uint16)


def bf16_value(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def round_bf16(a):
    bits = bf16_bits(a)
    return bits.tobytes(), bf16_value(bits)


def round_f16(a):
    h = np.asarray(a, dtype=np.float64).astype(np.float16)  # IEEE round to nearest even
    return h.tobytes(), h.astype(np.float64)


def round_f32(a):
    f = np.asarray(a, dtype=np.float64).astype(np.float32)
    return f.tobytes(), f.astype(np.float64)


def e4m3_decode(codes):
    """F8_E4M3 (the 'fn' variant: no infinities, 0x7F/0xFF NaN, max 448) -> float64."""
    c = np.asarray(codes, dtype=np.uint8).astype(np.int64)
    sign = np.where(c & 0x80, -1.0, 1.0)
    exp = (c >> 3) & 0xF
    mant = (c & 7).astype(np.float64)
    val = np.where(exp == 0, mant / 8.0 * 2.0 ** -6, (1.0 + mant / 8.0) * 2.0 ** (exp - 7.0))
    val = np.where((c & 0x7F) == 0x7F, np.nan, val)
    return sign * val


_E4M3_POS = e4m3_decode(np.arange(0x7F, dtype=np.uint8))  # codes 0..126: 0 .. 448, ascending


def e4m3_encode(a):
    """float64 -> F8_E4M3 codes, round to nearest, ties to even code, saturating at +-448."""
    a = np.asarray(a, dtype=np.float64)
    mag = np.minimum(np.abs(a), FP8_MAX)
    hi = np.clip(np.searchsorted(_E4M3_POS, mag, side="left"), 0, 126)
    lo = np.maximum(hi - 1, 0)
    d_lo = mag - _E4M3_POS[lo]
    d_hi = _E4M3_POS[hi] - mag
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    code = np.where(pick_hi, hi, lo).astype(np.uint8)
    return np.where((a < 0) & (code != 0), code | 0x80, code).astype(np.uint8)


def quantize_fp8_blocks(w):
    """DeepSeek-V3 convention: per 128x128 block, scale_inv = amax/448 (F32), stored value
    q = e4m3(w / scale_inv); the weight is q * scale_inv[block]. Returns (codes, scale_inv
    F32 [ceil(out/128), ceil(in/128)], dequantised float64)."""
    out_dim, in_dim = w.shape
    nb_o, nb_i = -(-out_dim // FP8_BLOCK), -(-in_dim // FP8_BLOCK)
    scale = np.zeros((nb_o, nb_i), dtype=np.float32)
    codes = np.zeros(w.shape, dtype=np.uint8)
    deq = np.zeros(w.shape, dtype=np.float64)
    for bo in range(nb_o):
        for bi in range(nb_i):
            rs = slice(bo * FP8_BLOCK, min(out_dim, (bo + 1) * FP8_BLOCK))
            cs = slice(bi * FP8_BLOCK, min(in_dim, (bi + 1) * FP8_BLOCK))
            blk = w[rs, cs]
            s = np.float32(max(np.abs(blk).max(), 1e-12) / FP8_MAX)
            scale[bo, bi] = s
            codes[rs, cs] = e4m3_encode(blk / float(s))
            deq[rs, cs] = e4m3_decode(codes[rs, cs]) * float(s)
    return codes, scale, deq


def e2m1_decode(nibbles):
    """OCP MX v1.0, FP4 E2M1: 1 sign bit, 2 exponent bits (bias 1), 1 mantissa bit, no
    infinities or NaN; exponent 0 is subnormal (0 or 0.5). -> float64."""
    n = np.asarray(nibbles, dtype=np.int64)
    sign = np.where(n & 8, -1.0, 1.0)
    exp = (n >> 1) & 3
    mant = (n & 1).astype(np.float64)
    val = np.where(exp == 0, mant * 0.5, (1.0 + mant / 2.0) * 2.0 ** (exp - 1.0))
    return sign * val


_E2M1_POS = e2m1_decode(np.arange(8))  # 0, 0.5, 1, 1.5, 2, 3, 4, 6


def e8m0_decode(codes):
    """OCP MX v1.0, E8M0 scale: 2^(code - 127); code 0xFF is NaN."""
    c = np.asarray(codes, dtype=np.int64)
    return np.where(c == 255, np.nan, 2.0 ** (c - 127.0))


def e2m1_encode(a):
    """float64 -> E2M1 nibbles: round to nearest (ties to the even code), saturating at +-6."""
    a = np.asarray(a, dtype=np.float64)
    mag = np.minimum(np.abs(a), 6.0)
    hi = np.clip(np.searchsorted(_E2M1_POS, mag, side="left"), 0, 7)
    lo = np.maximum(hi - 1, 0)
    d_lo, d_hi = mag - _E2M1_POS[lo], _E2M1_POS[hi] - mag
    code = np.where((d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0)), hi, lo)
    return np.where((a < 0) & (code != 0), code | 8, code).astype(np.uint8)


def quantize_mxfp4(w):
    """w [..., rows, cols] (cols a multiple of 32) -> MXFP4 as the OCP MX spec's conversion
    (6.3): per block of 32 along cols the shared scale X = 2^(floor(log2(amax)) - 2) (2: the
    largest E2M1 exponent), as E8M0; each element e2m1(v / X). Returns (blocks [..., rows,
    cols/32, 16] U8, the even element in the low nibble, scales [..., rows, cols/32] U8, the
    dequantised values [..., rows, cols] float64)."""
    *lead, rows, cols = w.shape
    b = w.reshape(*lead, rows, cols // MX_BLOCK, MX_BLOCK)
    amax = np.abs(b).max(axis=-1)
    shared = np.floor(np.log2(np.maximum(amax, 2.0 ** -120))) - 2
    scales = np.clip(shared + 127, 0, 254).astype(np.uint8)
    nib = e2m1_encode(b / e8m0_decode(scales)[..., None])
    blocks = (nib[..., 0::2] | (nib[..., 1::2] << 4)).astype(np.uint8)
    deq = (e2m1_decode(nib) * e8m0_decode(scales)[..., None]).reshape(*lead, rows, cols)
    return blocks, scales, deq


# --------------------------------------------------------------------------------------------
# safetensors: 8-byte little-endian header length, JSON header {name: {dtype, shape,
# data_offsets: [begin, end]}} (offsets relative to the byte after the header), raw data.

ST_DTYPE = {"f32": "F32", "bf16": "BF16", "f16": "F16", "fp8": "F8_E4M3", "mxfp4": "U8"}


def write_safetensors(path, tensors, meta=None):
    """tensors: list of (name, dtype string, shape, raw bytes), written in that order."""
    header, offset = {"__metadata__": meta if meta is not None else {"format": "pt"}}, 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * (-len(hjson) % 8)  # data starts 8-byte aligned, as safetensors does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for _, _, _, raw in tensors:
            f.write(raw)


class Store:
    """Collects the checkpoint's tensors: rounds each to the file's dtype and remembers the
    value as stored (float64) for the reference."""

    def __init__(self, dtype):
        self.dtype = dtype
        self.tensors = []      # (name, st dtype, shape, raw)
        self.values = {}       # name -> stored value, float64

    def add(self, name, w, dtype=None, quantize=False):
        dtype = dtype or self.dtype
        w = np.asarray(w, dtype=np.float64)
        if dtype == "fp8" and quantize and w.ndim == 2:
            codes, scale, deq = quantize_fp8_blocks(w)
            self.tensors.append((name, "F8_E4M3", w.shape, codes.tobytes()))
            self.tensors.append((name + "_scale_inv", "F32", scale.shape, scale.tobytes()))
            self.values[name] = deq
            return deq
        if dtype in ("fp8", "mxfp4"):  # gates, biases and norms stay BF16 in those checkpoints
            dtype = "bf16"
        raw, val = {"f32": round_f32, "bf16": round_bf16, "f16": round_f16}[dtype](w)
        self.tensors.append((name, ST_DTYPE[dtype], w.shape, raw))
        self.values[name] = val.reshape(w.shape)
        return self.values[name]

    def add_mxfp4(self, name, w_out_in):
        """A gpt-oss expert tensor NAME stored as MXFP4, from w [E, out, in] (the transpose of
        its BF16 form [E, in, out]): NAME_blocks [E, out, in/32, 16] and NAME_scales [E, out,
        in/32] (transformers' integrations/mxfp4.py layout). Returns the stored values in the
        BF16 form's orientation [E, in, out]."""
        blocks, scales, deq = quantize_mxfp4(np.asarray(w_out_in, dtype=np.float64))
        self.tensors.append((name + "_blocks", "U8", blocks.shape, blocks.tobytes()))
        self.tensors.append((name + "_scales", "U8", scales.shape, scales.tobytes()))
        self.values[name] = deq.transpose(0, 2, 1)
        return self.values[name]

    def write(self, outdir, shards):
        """model.safetensors, or N shards split by size in order (a layer may straddle two
        shards, as in real checkpoints) plus model.safetensors.index.json."""
        total = sum(len(t[3]) for t in self.tensors)
        if shards <= 1:
            write_safetensors(os.path.join(outdir, "model.safetensors"), self.tensors)
            return
        per, groups, cur, size = total / shards, [], [], 0
        for t in self.tensors:
            if cur and size >= per * (len(groups) + 1) and len(groups) < shards - 1:
                groups.append(cur)
                cur = []
            cur.append(t)
            size += len(t[3])
        groups.append(cur)
        while len(groups) < shards:
            groups.append([])
        weight_map = {}
        for i, g in enumerate(groups):
            fname = "model-%05d-of-%05d.safetensors" % (i + 1, shards)
            write_safetensors(os.path.join(outdir, fname), g)
            for t in g:
                weight_map[t[0]] = fname
        with open(os.path.join(outdir, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


# --------------------------------------------------------------------------------------------
# Families: config.json (real key names), which layers are MoE, tensor names.

# --hf-defaults: the optional keys config.json leaves out, each with the default of the
# family's configuration class in transformers (configuration_qwen2_moe.py Qwen2MoeConfig,
# configuration_qwen3_moe.py Qwen3MoeConfig, configuration_deepseek_v2.py DeepseekV2Config,
# configuration_deepseek_v3.py DeepseekV3Config, configuration_gpt_oss.py GptOssConfig), which
# the reference then computes with. moe_layer_freq is DeepSeek's own code's (transformers
# reads none: every layer from first_k_dense_replace on). Mixtral's modeling file reads no
# norm_topk_prob (it always renormalises): its config.json says false, which must change
# nothing; nor does DeepSeek-V2's (it never renormalises), whose config.json keeps the key.
HF_DEFAULTS = {
    "qwen2_moe": {"shared_expert_intermediate_size": 5632, "norm_topk_prob": False,
                  "decoder_sparse_step": 1, "mlp_only_layers": []},
    "qwen3_moe": {"norm_topk_prob": False, "decoder_sparse_step": 1, "mlp_only_layers": []},
    "deepseek_v2": {"n_shared_experts": 2, "routed_scaling_factor": 1.0, "topk_method": "greedy",
                    "first_k_dense_replace": 0, "moe_layer_freq": 1},
    "deepseek_v3": {"n_group": 8, "topk_group": 4, "routed_scaling_factor": 2.5,
                    "norm_topk_prob": True, "n_shared_experts": 1, "first_k_dense_replace": 3,
                    "moe_layer_freq": 1},
    "gpt_oss": {"swiglu_limit": 7.0},
}


def hf_defaults(family, c):
    """c with HF_DEFAULTS[family] in, and the keys config.json then leaves out."""
    d = HF_DEFAULTS.get("deepseek_v3" if family == "kimi_k2" else family)
    if family == "mixtral":
        c["norm_topk_prob"] = False
        return []
    if d is None:
        sys.exit("make_reference: --hf-defaults: no defaults for %s" % family)
    c.update(d)
    if "first_k_dense_replace" in d:  # keep the MoE layers' count after the dense ones
        c["num_hidden_layers"] = d["first_k_dense_replace"] + c["num_hidden_layers"] - 1
    return sorted(d)


def family_config(family, dtype, a):
    """The tiny config.json of FAMILY. Sizes from the command line (a) or the defaults."""
    H = a.hidden or (192 if dtype == "fp8" else 64)
    if dtype == "mxfp4" and (H % MX_BLOCK or (a.ffn or 64) % MX_BLOCK):
        sys.exit("make_reference: mxfp4 needs hidden and ffn multiples of %d" % MX_BLOCK)
    E = a.experts or 16
    c = {"hidden_size": H, "hidden_act": "silu", "vocab_size": 32, "num_attention_heads": 4,
         "num_key_value_heads": 2, "rms_norm_eps": 1e-6, "torch_dtype": {
             "f32": "float32", "bf16": "bfloat16", "f16": "float16", "fp8": "bfloat16",
             "mxfp4": "bfloat16"}[dtype]}
    if family == "mixtral":
        c.update(architectures=["MixtralForCausalLM"], model_type="mixtral",
                 num_hidden_layers=a.moe_layers or 2, num_local_experts=E, num_experts_per_tok=2,
                 intermediate_size=a.ffn or 96)
    elif family in ("qwen2_moe", "qwen3_moe"):
        c.update(num_experts=E, num_experts_per_tok=4, moe_intermediate_size=a.ffn or 48,
                 intermediate_size=80, norm_topk_prob=family == "qwen3_moe")
        if family == "qwen2_moe":
            # Layer 0 dense by mlp_only_layers: MoE layers 1..3.
            c.update(architectures=["Qwen2MoeForCausalLM"], model_type="qwen2_moe",
                     num_hidden_layers=1 + (a.moe_layers or 3), decoder_sparse_step=1,
                     mlp_only_layers=[0], shared_expert_intermediate_size=64)
        else:
            # decoder_sparse_step 2 makes the even layers dense, mlp_only_layers [3] one more:
            # MoE layers 1 and 5.
            c.update(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe",
                     num_hidden_layers=6, decoder_sparse_step=2, mlp_only_layers=[3],
                     head_dim=16)
    elif family in ("deepseek_v2", "deepseek_v2_group"):
        # norm_topk_prob false as in DeepSeek-V2 / V2-Lite's config.json; the group variant
        # says true, which transformers' DeepseekV2Moe does not read (it never renormalises;
        # DeepSeek's own code would renormalise instead of scaling): it must change nothing.
        c.update(architectures=["DeepseekV2ForCausalLM"], model_type="deepseek_v2",
                 num_hidden_layers=1 + (a.moe_layers or 3), n_routed_experts=E,
                 num_experts_per_tok=4, moe_intermediate_size=a.ffn or 32, n_shared_experts=2,
                 first_k_dense_replace=1, moe_layer_freq=1, intermediate_size=80,
                 topk_method="group_limited_greedy" if family.endswith("group") else "greedy",
                 n_group=4, topk_group=2, routed_scaling_factor=2.0,
                 norm_topk_prob=family.endswith("group"),
                 scoring_func="softmax", q_lora_rank=None, kv_lora_rank=16,
                 qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16)
    elif family in ("deepseek_v3", "kimi_k2"):
        # Kimi-K2's config.json names the DeepSeek-V3 architecture with its own model_type.
        c.update(architectures=["DeepseekV3ForCausalLM"],
                 model_type="kimi_k2" if family == "kimi_k2" else "deepseek_v3",
                 num_hidden_layers=1 + (a.moe_layers or 3), n_routed_experts=E,
                 moe_intermediate_size=a.ffn or (160 if dtype == "fp8" else 32),
                 first_k_dense_replace=1, moe_layer_freq=1, intermediate_size=80,
                 norm_topk_prob=True, scoring_func="sigmoid", topk_method="noaux_tc",
                 q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8,
                 v_head_dim=16)
        if family == "deepseek_v3":  # DeepSeek-V3's knobs, scaled down (256 experts, 8 groups)
            c.update(num_experts_per_tok=4, n_shared_experts=1, n_group=4, topk_group=2,
                     routed_scaling_factor=2.5, num_nextn_predict_layers=1)
        else:  # Kimi-K2's knobs: one group, 1 shared expert, scaling 2.827 (384 experts, k 8)
            c.update(num_experts_per_tok=6, n_shared_experts=1, n_group=1, topk_group=1,
                     routed_scaling_factor=2.827, num_nextn_predict_layers=0)
        if dtype == "fp8":
            c["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                        "quant_method": "fp8", "weight_block_size": [128, 128]}
    elif family == "gpt_oss":
        c.update(architectures=["GptOssForCausalLM"], model_type="gpt_oss",
                 num_hidden_layers=a.moe_layers or 2, num_local_experts=E, num_experts_per_tok=4,
                 experts_per_token=4,
                 intermediate_size=a.ffn or (64 if dtype == "mxfp4" else 48), swiglu_limit=7.0,
                 head_dim=16, hidden_act="silu")
        if dtype == "mxfp4":  # as gpt-oss's release: the experts quantised, the rest not
            c["quantization_config"] = {
                "quant_method": "mxfp4",
                "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                           "model.embed_tokens", "lm_head"]}
    c["_omit"] = hf_defaults(family, c) if a.hf_defaults else []
    return c


def moe_layers(c):
    """Decoder layers whose MLP is MoE, by each family's rule."""
    L, arch = c["num_hidden_layers"], c["architectures"][0]
    if arch in ("MixtralForCausalLM", "GptOssForCausalLM"):  # every layer
        return list(range(L))
    if arch in ("Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM"):
        # modeling_qwen2_moe.py / modeling_qwen3_moe.py, Qwen*MoeDecoderLayer.__init__
        return [l for l in range(L) if l not in c["mlp_only_layers"] and c["num_experts"] > 0
                and (l + 1) % c["decoder_sparse_step"] == 0]
    # DeepSeek's own modeling_deepseek.py DeepseekV*DecoderLayer: layer >= first_k_dense_replace
    # and layer % moe_layer_freq == 0 (transformers' port checks only the first; freq is 1).
    return [l for l in range(L) if l >= c["first_k_dense_replace"]
            and l % c["moe_layer_freq"] == 0]


def n_experts(c):
    for k in ("num_local_experts", "num_experts", "n_routed_experts"):
        if k in c:
            return c[k]
    raise KeyError("experts")


def expert_ffn(c):
    return c.get("moe_intermediate_size", c.get("intermediate_size"))


def mlp_names(prefix, family):
    if family == "mixtral":
        return prefix + ".w1.weight", prefix + ".w3.weight", prefix + ".w2.weight"
    return prefix + ".gate_proj.weight", prefix + ".up_proj.weight", prefix + ".down_proj.weight"


# --------------------------------------------------------------------------------------------
# Weights.

def linear(rng, out_dim, in_dim, gain=1.0):
    return rng.standard_normal((out_dim, in_dim)) * (gain / math.sqrt(in_dim))


def add_mlp(st, rng, prefix, family, H, F, quant):
    g, u, d = mlp_names(prefix, family)
    return {"gate": st.add(g, linear(rng, F, H, 1.0), quantize=quant),
            "up": st.add(u, linear(rng, F, H, 1.0), quantize=quant),
            "down": st.add(d, linear(rng, H, F, 0.5), quantize=quant)}


def add_ignored_layer_tensors(st, rng, l, c):
    """Attention, norms and (for dense layers) the dense MLP: present in real checkpoints,
    never read by a MoE runtime."""
    H, p = c["hidden_size"], "model.layers.%d" % l
    st.add(p + ".input_layernorm.weight", np.ones(H))
    st.add(p + ".post_attention_layernorm.weight", np.ones(H))
    if c["architectures"][0].startswith("Deepseek"):
        st.add(p + ".self_attn.kv_a_proj_with_mqa.weight", linear(rng, 24, H), quantize=True)
        st.add(p + ".self_attn.kv_a_layernorm.weight", np.ones(16))
        st.add(p + ".self_attn.o_proj.weight", linear(rng, H, 64), quantize=True)
    else:
        for n, o in (("q_proj", 64), ("k_proj", 32), ("v_proj", 32)):
            st.add(p + ".self_attn.%s.weight" % n, linear(rng, o, H))
        st.add(p + ".self_attn.o_proj.weight", linear(rng, H, 64))
        if c["architectures"][0] == "GptOssForCausalLM":
            st.add(p + ".self_attn.sinks", rng.standard_normal(4))


def make_weights(family, c, st, rng):
    """All tensors of the checkpoint, in file order; returns {layer: MoE weights as stored}."""
    H, E, F = c["hidden_size"], n_experts(c), expert_ffn(c)
    quant = st.dtype == "fp8"
    moe = set(moe_layers(c))
    st.add("model.embed_tokens.weight", rng.standard_normal((c["vocab_size"], H)))
    layers = {}
    extra = c.get("num_nextn_predict_layers", 0)  # DeepSeek-V3's MTP layer: beyond the model
    for l in range(c["num_hidden_layers"] + extra):
        add_ignored_layer_tensors(st, rng, l, c)
        p = "model.layers.%d" % l
        if l not in moe and l < c["num_hidden_layers"]:
            add_mlp(st, rng, p + ".mlp", family, H, c["intermediate_size"], quant)
            continue
        w = {"experts": []}
        if family == "mixtral":
            w["gate"] = st.add(p + ".block_sparse_moe.gate.weight", linear(rng, E, H, 2.0))
            for e in range(E):
                w["experts"].append(add_mlp(st, rng, p + ".block_sparse_moe.experts.%d" % e,
                                            family, H, F, quant))
        elif family == "gpt_oss":
            w["gate"] = st.add(p + ".mlp.router.weight", linear(rng, E, H, 2.0))
            w["gate_bias"] = st.add(p + ".mlp.router.bias", rng.standard_normal(E) * 0.5)
            # Large enough that some gate/up values pass swiglu_limit and are clamped.
            gu = rng.standard_normal((E, H, 2 * F)) * (5.0 / math.sqrt(H))
            if st.dtype == "mxfp4":  # stored [E, 2F, H]: rows the interleaved gate/up outputs
                w["gate_up"] = st.add_mxfp4(p + ".mlp.experts.gate_up_proj", gu.transpose(0, 2, 1))
            else:
                w["gate_up"] = st.add(p + ".mlp.experts.gate_up_proj", gu)
            w["gate_up_bias"] = st.add(p + ".mlp.experts.gate_up_proj_bias",
                                       rng.standard_normal((E, 2 * F)) * 0.5)
            dn = rng.standard_normal((E, F, H)) * (0.05 / math.sqrt(F))
            if st.dtype == "mxfp4":  # stored [E, H, F]
                w["down"] = st.add_mxfp4(p + ".mlp.experts.down_proj", dn.transpose(0, 2, 1))
            else:
                w["down"] = st.add(p + ".mlp.experts.down_proj", dn)
            w["down_bias"] = st.add(p + ".mlp.experts.down_proj_bias",
                                    rng.standard_normal((E, H)) * 0.1)
        else:
            w["gate"] = st.add(p + ".mlp.gate.weight", linear(rng, E, H, 2.0))
            if family in ("deepseek_v3", "kimi_k2"):
                # Small against the sigmoid scores (0..1) but enough to change choices; kept
                # positive-sum so scores + bias stay > 0 (masked experts read 0).
                w["bias"] = st.add(p + ".mlp.gate.e_score_correction_bias",
                                   rng.uniform(0.0, 0.15, E), dtype="f32")
            for e in range(E):
                w["experts"].append(add_mlp(st, rng, p + ".mlp.experts.%d" % e, family, H, F,
                                            quant))
            if family == "qwen2_moe":
                w["shared"] = add_mlp(st, rng, p + ".mlp.shared_expert", family, H,
                                      c["shared_expert_intermediate_size"], quant)
                w["shared_gate"] = st.add(p + ".mlp.shared_expert_gate.weight",
                                          linear(rng, 1, H, 1.0))
            elif family not in ("qwen3_moe",):
                w["shared"] = add_mlp(st, rng, p + ".mlp.shared_experts", family, H,
                                      F * c["n_shared_experts"], quant)
        if l < c["num_hidden_layers"]:
            layers[l] = w
    st.add("model.norm.weight", np.ones(H))
    st.add("lm_head.weight", rng.standard_normal((c["vocab_size"], H)))
    return layers


# --------------------------------------------------------------------------------------------
# The reference math (float64). Each function cites the transformers code it follows.

def silu(x):
    return x / (1.0 + np.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softmax(x):
    z = np.exp(x - x.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def swiglu_mlp(x, m):
    """down(act(gate(x)) * up(x)): MixtralBlockSparseTop2MLP.forward (modeling_mixtral.py),
    Qwen2MoeMLP / Qwen3MoeMLP.forward, DeepseekV2MLP / DeepseekV3MLP.forward."""
    return (silu(x @ m["gate"].T) * (x @ m["up"].T)) @ m["down"].T


def topk_desc(scores, k):
    """Indices of the k largest per row, largest first, and the gap between the k-th and the
    (k+1)-th value (how far the choice is from a tie)."""
    order = np.argsort(-scores, axis=-1, kind="stable")
    idx = order[:, :k]
    srt = np.take_along_axis(scores, order, axis=-1)
    gap = srt[:, k - 1] - srt[:, k] if scores.shape[1] > k else np.full(len(scores), np.inf)
    return idx, gap


def route(family, c, w, x):
    """Returns (indices [T,k], weights [T,k], smallest selection margin)."""
    k = c["num_experts_per_tok"]
    logits = x @ w["gate"].T
    if family == "mixtral":
        # modeling_mixtral.py MixtralSparseMoeBlock.forward: softmax, top-k, renormalise.
        # (softmax is monotone: choosing on the logits is the same choice, and the margin is
        # then measured where an F32 gate's rounding lives.)
        p = softmax(logits)
        idx, gap = topk_desc(logits, k)
        wt = np.take_along_axis(p, idx, -1)
        return idx, wt / wt.sum(-1, keepdims=True), gap.min()
    if family in ("qwen2_moe", "qwen3_moe"):
        # modeling_qwen2_moe.py Qwen2MoeSparseMoeBlock.forward / modeling_qwen3_moe.py
        # Qwen3MoeSparseMoeBlock.forward: softmax, top-k, renormalise if norm_topk_prob.
        p = softmax(logits)
        idx, gap = topk_desc(logits, k)
        wt = np.take_along_axis(p, idx, -1)
        if c["norm_topk_prob"]:
            wt = wt / wt.sum(-1, keepdims=True)
        return idx, wt, gap.min()
    if family in ("deepseek_v2", "deepseek_v2_group"):
        # modeling_deepseek_v2.py DeepseekV2Moe.route_tokens_to_experts: softmax; greedy top-k,
        # or group_limited_greedy: groups scored by their max, topk_group groups kept, others
        # masked to 0, top-k; weights * routed_scaling_factor.
        # Chosen on the logits (softmax is monotone, so a group's max probability is its max
        # logit), masking with -inf: the same choice as masking probabilities (all > 0) to 0.
        p = softmax(logits)
        sel, margin = logits, np.inf
        if c["topk_method"] == "group_limited_greedy":
            sel, margin = mask_groups(logits, c, logits.reshape(len(p), c["n_group"], -1).max(-1),
                                      -np.inf)
        idx, gap = topk_desc(sel, k)
        # DeepseekV2Moe.route_tokens_to_experts: topk_weight * routed_scaling_factor, whatever
        # norm_topk_prob says (it reads no such key)
        wt = np.take_along_axis(p, idx, -1)
        return idx, wt * c["routed_scaling_factor"], min(margin, gap.min())
    if family in ("deepseek_v3", "kimi_k2"):
        # modeling_deepseek_v3.py DeepseekV3TopkRouter.get_topk_indices / forward: sigmoid
        # scores; scores + e_score_correction_bias for the choice only; groups scored by the
        # sum of their top 2, topk_group kept; top-k; weights = scores (no bias) gathered,
        # / (sum + 1e-20) if norm_topk_prob, * routed_scaling_factor.
        s = sigmoid(logits)
        choice = s + w["bias"][None, :]
        g = np.sort(choice.reshape(len(s), c["n_group"], -1), axis=-1)[:, :, -2:].sum(-1)
        masked, margin = mask_groups(choice, c, g)
        idx, gap = topk_desc(masked, k)
        wt = np.take_along_axis(s, idx, -1)
        if c["norm_topk_prob"]:
            wt = wt / (wt.sum(-1, keepdims=True) + 1e-20)
        return idx, wt * c["routed_scaling_factor"], min(margin, gap.min())
    if family == "gpt_oss":
        # modeling_gpt_oss.py GptOssTopKRouter.forward: logits = x W^T + b; top-k of the
        # logits; softmax over those k.
        logits = logits + w["gate_bias"][None, :]
        idx, gap = topk_desc(logits, k)
        return idx, softmax(np.take_along_axis(logits, idx, -1)), gap.min()
    raise ValueError(family)


def mask_groups(scores, c, group_scores, fill=0.0):
    """Keeps the topk_group best groups, the others' experts read fill (transformers:
    masked_fill(~score_mask, 0.0))."""
    T, G = group_scores.shape
    if c["topk_group"] >= G:
        return scores, np.inf
    gidx, gap = topk_desc(group_scores, c["topk_group"])
    keep = np.zeros((T, G), dtype=bool)
    np.put_along_axis(keep, gidx, True, axis=-1)
    keep = np.repeat(keep, scores.shape[1] // G, axis=1)
    return np.where(keep, scores, fill), gap.min()


def gpt_oss_expert(x, w, e, limit):
    """modeling_gpt_oss.py GptOssExperts.forward: gate_up = x @ gate_up_proj[e] + bias;
    gate = [..., ::2], up = [..., 1::2]; gate clamped above at limit, up to [-limit, limit];
    glu = gate * sigmoid(gate * 1.702); out = ((up + 1) * glu) @ down_proj[e] + bias."""
    gu = x @ w["gate_up"][e] + w["gate_up_bias"][e]
    gate, up = np.minimum(gu[:, ::2], limit), np.clip(gu[:, 1::2], -limit, limit)
    glu = gate * sigmoid(gate * GPT_OSS_ALPHA)
    return ((up + 1.0) * glu) @ w["down"][e] + w["down_bias"][e], int((gu[:, ::2] > limit).sum()
                                                                      + (np.abs(gu[:, 1::2]) > limit).sum())


def moe_block(family, c, w, x, stats, given=None):
    """One layer's MoE block output (without the residual); given: (ids, weights) [T, k]
    that replace the router's choice (a replayed routing trace), else the router routes."""
    if given is None:
        idx, wt, margin = route(family, c, w, x)
    else:
        idx, wt, margin = given[0], given[1].astype(np.float64), np.inf
    stats["margin"] = min(stats.get("margin", np.inf), margin)
    out = np.zeros_like(x)
    for e in range(n_experts(c)):
        tok, slot = np.nonzero(idx == e)
        if len(tok) == 0:
            continue
        stats.setdefault("used", set()).add(e)
        if family == "gpt_oss":
            y, clamped = gpt_oss_expert(x[tok], w, e, c["swiglu_limit"])
            stats["clamped"] = stats.get("clamped", 0) + clamped
        else:
            y = swiglu_mlp(x[tok], w["experts"][e])
        np.add.at(out, tok, y * wt[tok, slot][:, None])
    if family == "qwen2_moe":
        # Qwen2MoeSparseMoeBlock.forward: shared_expert(x) * sigmoid(shared_expert_gate(x)).
        out += sigmoid(x @ w["shared_gate"].T) * swiglu_mlp(x, w["shared"])
    elif "shared" in w:
        # DeepseekV2Moe.forward / DeepseekV3MoE.forward: + shared_experts(x), unweighted.
        out += swiglu_mlp(x, w["shared"])
    return out


def reference(family, c, layers, chosen, x, given=None):
    stats = {}
    for l in chosen:
        x = x + moe_block(family, c, layers[l], x, stats, given[l] if given else None)
    return x, stats


def top_k(c):
    return c.get("num_experts_per_tok", c.get("experts_per_token"))


def given_routing(c, chosen, tokens, rng):
    """A routing chosen at random, not by the router: per MoE layer and token k distinct
    experts and F32 weights in (0, 1] (a trace as serving engines record them)."""
    E, k = n_experts(c), top_k(c)
    out = {}
    for l in chosen:
        ids = np.stack([rng.permutation(E)[:k] for _ in range(tokens)]).astype(np.int32)
        wt = rng.uniform(0.05, 1.0, (tokens, k)).astype(np.float32)
        out[l] = (ids, wt)
    return out


def write_routing_trace(path, family, c, chosen, tokens, given):
    """moed's routing trace format (docs/routing.md), from its description: per layer L
    layers.L.topk_ids I32 [T, k] and layers.L.topk_weights F32 [T, k], string metadata."""
    meta = {"format": "moed-routing/1", "num_experts": str(n_experts(c)),
            "top_k": str(top_k(c)), "tokens_per_step": str(tokens),
            "layers": json.dumps(chosen), "family": family,
            "source": "make_reference.py --given-routing", "weights": "router"}
    tensors = []
    for l in chosen:
        ids, wt = given[l]
        tensors.append(("layers.%d.topk_ids" % l, "I32", ids.shape, ids.astype("<i4").tobytes()))
        tensors.append(("layers.%d.topk_weights" % l, "F32", wt.shape, wt.astype("<f4").tobytes()))
    write_safetensors(path, tensors, meta)


# --------------------------------------------------------------------------------------------

def build(outdir, family, dtype, a, seed):
    c = family_config(family, dtype, a)
    rng = np.random.default_rng(seed)
    st = Store(dtype)
    layers = make_weights(family, c, st, rng)
    moe = moe_layers(c)
    chosen = moe if a.layers is None else [int(v) for v in a.layers.split(",")]
    for l in chosen:
        if l not in moe:
            sys.exit("make_reference: layer %d is not a MoE layer of %s (MoE layers %s)"
                     % (l, family, moe))
    x = rng.standard_normal((a.tokens, c["hidden_size"])).astype(np.float32)
    given = given_routing(c, chosen, a.tokens, rng) if a.given_routing else None
    y, stats = reference(family, c, layers, chosen, x.astype(np.float64), given)
    stats["given"] = given
    return c, st, moe, chosen, x, y, stats


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("family", choices=FAMILIES)
    ap.add_argument("dtype", choices=DTYPES)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--layers", help="comma-separated MoE decoder layers to run (default all)")
    ap.add_argument("--experts", type=int)
    ap.add_argument("--hidden", type=int)
    ap.add_argument("--ffn", type=int)
    ap.add_argument("--moe-layers", type=int, dest="moe_layers")
    ap.add_argument("--given-routing", action="store_true", dest="given_routing",
                    help="route by a random choice of experts and weights, not the router, "
                         "and write it as OUTDIR/routing.safetensors (a moed routing trace)")
    ap.add_argument("--min-margin", type=float, default=2e-5, dest="min_margin",
                    help="retry with the next seed while a routing choice is closer to a tie")
    ap.add_argument("--hf-defaults", action="store_true", dest="hf_defaults",
                    help="leave the optional routing keys out of config.json; the reference "
                         "uses transformers' configuration defaults for them")
    a = ap.parse_args()
    if a.dtype == "fp8" and a.family not in ("deepseek_v3", "kimi_k2"):
        sys.exit("make_reference: fp8 is the DeepSeek-V3 convention (deepseek_v3, kimi_k2)")
    if a.dtype == "mxfp4" and a.family != "gpt_oss":
        sys.exit("make_reference: mxfp4 is gpt-oss's release (gpt_oss)")
    # Ties: moed's F32 gate and this float64 one may order near-equal scores differently, so
    # keep only data whose every routing choice (top-k, groups) wins by min_margin.
    for attempt in range(100):
        seed = a.seed + 1000 * attempt
        c, st, moe, chosen, x, y, stats = build(a.outdir, a.family, a.dtype, a, seed)
        if stats["margin"] >= a.min_margin:
            break
    else:
        sys.exit("make_reference: no seed within 100 tries routes without near-ties")
    os.makedirs(a.outdir, exist_ok=True)
    with open(os.path.join(a.outdir, "config.json"), "w") as f:
        json.dump({k: v for k, v in c.items() if k not in c["_omit"] and k != "_omit"}, f,
                  indent=2)
    st.write(a.outdir, a.shards)
    write_safetensors(os.path.join(a.outdir, "input.safetensors"),
                      [("input", "F32", x.shape, x.tobytes())])
    y32 = y.astype(np.float32)
    write_safetensors(os.path.join(a.outdir, "expected.safetensors"),
                      [("output", "F32", y32.shape, y32.tobytes())])
    if stats["given"] is not None:
        write_routing_trace(os.path.join(a.outdir, "routing.safetensors"), a.family, c, chosen,
                            a.tokens, stats["given"])
    info = {"family": a.family, "dtype": a.dtype, "seed": seed, "tokens": a.tokens,
            "hidden": c["hidden_size"], "experts": n_experts(c), "moe_layers": moe,
            "layers": chosen, "experts_used": len(stats.get("used", ())),
            "omitted_keys": c["_omit"],
            "min_margin": stats["margin"], "clamped": stats.get("clamped", 0),
            "weight_bytes": sum(len(t[3]) for t in st.tensors)}
    with open(os.path.join(a.outdir, "reference.json"), "w") as f:
        json.dump(info, f, indent=2)
    print("make_reference: %s" % json.dumps(info))


if __name__ == "__main__":
    main()
