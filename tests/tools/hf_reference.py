"""tools.import_hf (test_import.py hf): for each family a tiny randomly initialised
transformers model, saved with save_pretrained and recorded by `moed-routing-import hf`; the
trace must hold, token by token, the experts and weights that the NumPy reference router
(tests/models/make_reference.py route, written from transformers' published math) computes
from the gate's weights and the MoE block's input, captured here by the test's own hooks."""

import json
import os
import sys

import numpy as np
import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "models"))

import make_reference as ref  # noqa: E402
import moed_routing as mr  # noqa: E402

TOKENS, VOCAB = 40, 96
MIN_MARGIN = 1e-3  # rows whose choice is closer to a tie than this are not compared


def families():
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  tie_word_embeddings=False)
    mla = dict(kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=8, qk_nope_head_dim=8,
               v_head_dim=16, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
               n_shared_experts=1, first_k_dense_replace=1)
    T = transformers
    return [
        ("mixtral", lambda: T.MixtralConfig(**common, num_local_experts=8, num_experts_per_tok=2),
         [0, 1, 2]),
        ("qwen2_moe", lambda: T.Qwen2MoeConfig(**common, num_experts=8, num_experts_per_tok=2,
                                               moe_intermediate_size=32,
                                               shared_expert_intermediate_size=32,
                                               norm_topk_prob=False, decoder_sparse_step=1,
                                               mlp_only_layers=[0]), [1, 2]),
        ("qwen3_moe", lambda: T.Qwen3MoeConfig(**common, head_dim=16, num_experts=8,
                                               num_experts_per_tok=2, moe_intermediate_size=32,
                                               norm_topk_prob=True, decoder_sparse_step=1,
                                               mlp_only_layers=[2]), [0, 1]),
        ("deepseek_v2", lambda: T.DeepseekV2Config(**common, **mla, topk_method="greedy",
                                                   n_group=1, topk_group=1,
                                                   routed_scaling_factor=2.0,
                                                   norm_topk_prob=False), [1, 2]),
        ("deepseek_v3", lambda: T.DeepseekV3Config(**common, **mla, n_group=4, topk_group=2,
                                                   routed_scaling_factor=2.5,
                                                   norm_topk_prob=True), [1, 2]),
        ("gpt_oss", lambda: T.GptOssConfig(**common, head_dim=16, num_local_experts=8,
                                           num_experts_per_tok=2, sliding_window=64),
         [0, 1, 2]),
    ]


def moe_block(layer):
    """The test's own view of a decoder layer's MoE block (not the recorder's)."""
    for name in ("block_sparse_moe", "mlp"):
        b = getattr(layer, name, None)
        if b is not None and getattr(b, "experts", None) is not None:
            return b
    return None


def gate_of(block):
    return block.gate if getattr(block, "gate", None) is not None else block.router


def run(tmp, cli, check):
    torch.manual_seed(0)
    for fam, make, moe_layers in families():
        d = os.path.join(tmp, fam)
        model = transformers.AutoModelForCausalLM.from_config(make())
        with torch.no_grad():  # O(1) logits: the 0.02 init makes near ties
            for layer in model.model.layers:
                b = moe_block(layer)
                if b is None:
                    continue
                g = gate_of(b)
                g.weight.copy_(torch.randn_like(g.weight) * 0.5)
                if getattr(g, "bias", None) is not None:
                    g.bias.copy_(torch.randn_like(g.bias) * 0.5)
                if getattr(g, "e_score_correction_bias", None) is not None:
                    g.e_score_correction_bias.copy_(torch.rand_like(g.e_score_correction_bias)
                                                    * 0.15)
        model.save_pretrained(d)
        ids = torch.randint(0, VOCAB, (TOKENS,)).tolist()
        with open(os.path.join(d, "ids.json"), "w") as f:
            json.dump(ids, f)
        out_path = os.path.join(d, "trace.safetensors")
        rc, out = cli("hf", "--model", d, "--token-ids", os.path.join(d, "ids.json"),
                      "--dtype", "float32", "-o", out_path)
        check(rc == 0, f"{fam}: moed-routing-import hf: rc {rc}: {out.strip()}")
        if rc != 0:
            continue
        t = mr.read(out_path)
        check(t.layer_ids == moe_layers and t.family == fam and t.num_experts == 8 and
              t.top_k == 2 and t.rows == TOKENS and not t.uniform_weights,
              f"{fam}: trace {t.layer_ids} {t.family} {t.num_experts} {t.top_k} {t.rows} "
              f"{t.uniform_weights}")

        m2 = transformers.AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32)
        m2.eval()
        inputs, hooks = {}, []
        for i, layer in enumerate(m2.model.layers):
            b = moe_block(layer)
            if b is not None:
                hooks.append(b.register_forward_pre_hook(
                    lambda m, a, i=i: inputs.__setitem__(
                        i, a[0].detach().reshape(-1, a[0].shape[-1]).double().numpy())))
        with torch.no_grad():
            m2(input_ids=torch.tensor([ids]), use_cache=False)
        for h in hooks:
            h.remove()
        c = m2.config.to_dict()
        for L in t.layer_ids:
            g = gate_of(moe_block(m2.model.layers[L]))
            w = {"gate": g.weight.detach().double().numpy()}
            if getattr(g, "bias", None) is not None:
                w["gate_bias"] = g.bias.detach().double().numpy()
            if getattr(g, "e_score_correction_bias", None) is not None:
                w["bias"] = g.e_score_correction_bias.detach().double().numpy()
            compared = 0
            for r in range(TOKENS):
                idx, wt, margin = ref.route(fam, c, w, inputs[L][r:r + 1])
                if margin < MIN_MARGIN:
                    continue
                compared += 1
                want, got = np.argsort(idx[0]), np.argsort(t.ids[L][r])
                check(np.array_equal(idx[0][want], t.ids[L][r][got]),
                      f"{fam} layer {L} token {r}: experts {t.ids[L][r].tolist()}, the "
                      f"reference {idx[0].tolist()}")
                check(np.allclose(wt[0][want], t.weights[L][r][got], rtol=1e-4, atol=1e-6),
                      f"{fam} layer {L} token {r}: weights {t.weights[L][r].tolist()}, the "
                      f"reference {wt[0].tolist()}")
            check(compared >= TOKENS * 3 // 4, f"{fam} layer {L}: only {compared} of {TOKENS} "
                                               "tokens far enough from a tie to compare")
        print(f"{fam}: {len(t.layer_ids)} layers x {TOKENS} tokens; {t.source}")
