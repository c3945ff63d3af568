#!/usr/bin/env python3
"""Sanity tests of the NumPy reference itself (ctest models.reference_selfcheck): the
safetensors writer against a reader written here from the format's description, BF16/F16/FP8
rounding of known values, each family's routing of hand-made logits against hand-computed
experts and weights, the dense/MoE layer rules, and the checkpoint directories' layout."""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_reference as mr  # noqa: E402

DTYPE_SIZE = {"F32": 4, "BF16": 2, "F16": 2, "F8_E4M3": 1, "U8": 1}


def read_safetensors(path):
    """Independent reader: header length u64 LE, JSON header, data. Checks the layout rules
    a strict reader (moed's) applies: offsets contiguous from 0, sizes = prod(shape)*dtype."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    out, spans = {}, []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        size = DTYPE_SIZE[info["dtype"]] * int(np.prod(info["shape"], dtype=np.int64))
        assert e - b == size, (name, b, e, size)
        spans.append((b, e))
        out[name] = (info["dtype"], tuple(info["shape"]), data[b:e])
    spans.sort()
    pos = 0
    for b, e in spans:
        assert b == pos, "gap or overlap at %d" % b
        pos = e
    assert pos == len(data), "trailing bytes"
    return out


class Formats(unittest.TestCase):
    def test_safetensors_round_trip(self):
        rng = np.random.default_rng(3)
        a = rng.standard_normal((3, 5)).astype(np.float32)
        b = np.arange(7, dtype=np.uint16)
        c = np.arange(11, dtype=np.uint8)
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "t.safetensors")
            mr.write_safetensors(p, [("a.weight", "F32", a.shape, a.tobytes()),
                                     ("b", "BF16", b.shape, b.tobytes()),
                                     ("c_scale_inv", "F8_E4M3", c.shape, c.tobytes())])
            with open(p, "rb") as f:
                (n,) = struct.unpack("<Q", f.read(8))
            self.assertEqual((8 + n) % 8, 0, "data must start 8-byte aligned")
            t = read_safetensors(p)
        self.assertEqual(t["a.weight"][:2], ("F32", (3, 5)))
        np.testing.assert_array_equal(np.frombuffer(t["a.weight"][2], np.float32).reshape(3, 5), a)
        np.testing.assert_array_equal(np.frombuffer(t["b"][2], np.uint16), b)
        np.testing.assert_array_equal(np.frombuffer(t["c_scale_inv"][2], np.uint8), c)

    def test_bf16_rounding(self):
        cases = {1.0: 0x3F80, -2.0: 0xC000, math.pi: 0x4049, 0.0: 0x0000,
                 1 + 2 ** -8: 0x3F80,            # halfway: ties to even (down)
                 1 + 3 * 2 ** -8: 0x3F82,        # halfway: ties to even (up)
                 1 + 2 ** -8 + 2 ** -20: 0x3F81,  # just above halfway: up
                 3.0e38: 0x7F62, 1e-40: 0x0001}  # a large value, an F32 subnormal
        for v, bits in cases.items():
            got = int(mr.bf16_bits(np.array([v]))[0])
            self.assertEqual(got, bits, "bf16(%r) = %#06x, want %#06x" % (v, got, bits))
        _, val = mr.round_bf16(np.array([math.pi]))
        self.assertEqual(val[0], 3.140625)

    def test_f16_rounding(self):
        cases = {65504.0: 0x7BFF, 1 / 3: 0x3555, 2.0 ** -24: 0x0001, 1 + 2 ** -11: 0x3C00,
                 1 + 3 * 2 ** -11: 0x3C02, -0.5: 0xB800}
        for v, bits in cases.items():
            raw, _ = mr.round_f16(np.array([v]))
            self.assertEqual(struct.unpack("<H", raw)[0], bits, v)

    def test_fp8_e4m3(self):
        enc = lambda v: int(mr.e4m3_encode(np.array([v]))[0])  # noqa: E731
        cases = {448.0: 0x7E, 500.0: 0x7E, -448.0: 0xFE, 1.0: 0x38, 240.0: 0x77, 256.0: 0x78,
                 2.0 ** -6: 0x08,                 # smallest normal
                 2.0 ** -9: 0x01,                 # smallest subnormal
                 7 * 2.0 ** -9: 0x07,             # largest subnormal
                 2.0 ** -10: 0x00,                # half the smallest subnormal: tie to even 0
                 3 * 2.0 ** -10: 0x02,            # tie between 0x01 and 0x02: even
                 1.0625: 0x38, 1.1875: 0x3A,      # ties between normals: even mantissa
                 1.07: 0x39, 0.0: 0x00, -1.5: 0xBC}
        for v, code in cases.items():
            self.assertEqual(enc(v), code, "e4m3(%r) = %#04x, want %#04x" % (v, enc(v), code))
        self.assertEqual(mr.e4m3_decode(np.array([0x7E]))[0], 448.0)
        self.assertEqual(mr.e4m3_decode(np.array([0x01]))[0], 2.0 ** -9)
        self.assertEqual(mr.e4m3_decode(np.array([0x8F]))[0], -(1 + 7 / 8) * 2.0 ** -6)
        self.assertTrue(np.isnan(mr.e4m3_decode(np.array([0x7F, 0xFF]))).all())
        codes = np.arange(0x7F, dtype=np.uint8)
        np.testing.assert_array_equal(mr.e4m3_encode(mr.e4m3_decode(codes)), codes)
        np.testing.assert_array_equal(mr.e4m3_encode(-mr.e4m3_decode(codes[1:])), codes[1:] | 0x80)

    def test_fp8_blocks(self):
        rng = np.random.default_rng(5)
        w = rng.standard_normal((200, 300))
        w[150:, 260:] *= 100.0  # one block far larger: its own scale
        codes, scale, deq = mr.quantize_fp8_blocks(w)
        self.assertEqual(scale.shape, (2, 3))
        self.assertEqual(scale.dtype, np.float32)
        self.assertAlmostEqual(float(scale[1, 2]) / float(scale[0, 0]), 100.0, delta=30.0)
        # dequantised = code value * the block's scale, exactly
        blk = np.repeat(np.repeat(scale.astype(np.float64), 128, 0), 128, 1)[:200, :300]
        np.testing.assert_array_equal(deq, mr.e4m3_decode(codes) * blk)
        # 3 mantissa bits: relative error <= 2^-4 where the value is a normal e4m3 number
        normal = np.abs(w) / blk >= 2.0 ** -6
        rel = np.abs(deq - w)[normal] / np.abs(w)[normal]
        self.assertLessEqual(rel.max(), 2.0 ** -4 + 1e-12)
        # each block's largest magnitude maps to 448 (up to the F32 rounding of its scale)
        self.assertTrue(np.isclose(np.abs(deq[:128, :128]).max(), np.abs(w[:128, :128]).max(),
                                   rtol=1e-6))

    def test_mxfp4(self):
        # OCP MX v1.0's E2M1 table (sign, exponent bias 1, 1 mantissa bit) and E8M0 (bias 127)
        np.testing.assert_array_equal(mr.e2m1_decode(np.arange(16)),
                                      [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3,
                                       -4, -6])
        e = mr.e8m0_decode(np.array([127, 128, 126, 0, 254, 255]))
        np.testing.assert_array_equal(e[:5], [1.0, 2.0, 0.5, 2.0 ** -127, 2.0 ** 127])
        self.assertTrue(np.isnan(e[5]))
        enc = lambda v: int(mr.e2m1_encode(np.array([v]))[0])  # noqa: E731
        cases = {0.25: 0x0, 0.3: 0x1, 0.75: 0x2, 1.25: 0x2, 1.3: 0x3, 2.5: 0x4, 3.5: 0x6,
                 5.0: 0x6, 5.1: 0x7, 100.0: 0x7, -1.0: 0xA, -6.0: 0xF, 0.0: 0x0}
        for v, code in cases.items():  # ties (0.25, 0.75, 1.25, 2.5, 3.5, 5.0): even code
            self.assertEqual(enc(v), code, "e2m1(%r) = %#x, want %#x" % (v, enc(v), code))
        # a row of 64 (two blocks): the scale is 2^(floor(log2 amax) - 2); the even element is
        # the low nibble; dequantised = e2m1 x scale exactly
        row = np.zeros((1, 64))
        row[0, 0], row[0, 1], row[0, 5] = 6.0, -0.5, 3.0  # block 0: amax 6 -> scale 2^0
        row[0, 32], row[0, 33] = 40.0, 10.0                 # block 1: amax 40 -> 2^3
        blocks, scales, deq = mr.quantize_mxfp4(row)
        self.assertEqual(blocks.shape, (1, 2, 16))
        self.assertEqual(scales.tolist(), [[127, 130]])
        self.assertEqual(blocks[0, 0, 0], 0x7 | 0x9 << 4)  # 6.0 low, -0.5 high
        self.assertEqual(blocks[0, 0, 2], 0x5 << 4)        # element 5: byte 2, high nibble
        self.assertEqual(blocks[0, 1, 0], 0x6 | 0x2 << 4)  # 40/8 = 5 -> 4 (tie: even), 10/8
        self.assertEqual((deq[0, 0], deq[0, 1], deq[0, 5], deq[0, 32], deq[0, 33]),
                         (6.0, -0.5, 3.0, 32.0, 8.0))


def cfg(**kw):
    return dict(kw)


class Routing(unittest.TestCase):
    def route(self, family, c, logits, **w):
        logits = np.asarray(logits, dtype=np.float64)
        w["gate"] = logits[:, None]  # [E, 1]: x = [[1]] gives exactly these logits
        return mr.route(family, c, w, np.ones((1, 1)))

    def check(self, got, experts, weights):
        idx, wt, _ = got
        self.assertEqual(sorted(idx[0].tolist()), sorted(experts))
        order = {e: i for i, e in enumerate(idx[0].tolist())}
        np.testing.assert_allclose([wt[0][order[e]] for e in experts], weights, rtol=1e-12)

    def test_mixtral(self):
        got = self.route("mixtral", cfg(num_experts_per_tok=2), [1.0, 3.0, 2.0, 0.0])
        e3, e2 = math.exp(3), math.exp(2)
        self.check(got, [1, 2], [e3 / (e3 + e2), e2 / (e3 + e2)])

    def test_qwen(self):
        lg = [1.0, 3.0, 2.0, 0.0]
        z = sum(math.exp(v) for v in lg)
        got = self.route("qwen2_moe", cfg(num_experts_per_tok=2, norm_topk_prob=False), lg)
        self.check(got, [1, 2], [math.exp(3) / z, math.exp(2) / z])
        got = self.route("qwen3_moe", cfg(num_experts_per_tok=2, norm_topk_prob=True), lg)
        self.check(got, [1, 2], [math.exp(3) / (math.exp(3) + math.exp(2)),
                                 math.exp(2) / (math.exp(3) + math.exp(2))])

    def test_deepseek_v2(self):
        lg = [5.0, 0.0, 4.9, 0.0, 1.0, 0.5, 0.2, 0.1]
        z = sum(math.exp(v) for v in lg)
        c = cfg(num_experts_per_tok=2, topk_method="greedy", n_group=4, topk_group=1,
                routed_scaling_factor=2.0, norm_topk_prob=False)
        self.check(self.route("deepseek_v2", c, lg), [0, 2],
                   [2 * math.exp(5) / z, 2 * math.exp(4.9) / z])
        # group_limited_greedy: groups of 2 scored by their max; only group 0 kept, so the
        # second expert is 1 (logit 0), not 2; weights are the unrenormalised probabilities.
        c["topk_method"] = "group_limited_greedy"
        self.check(self.route("deepseek_v2_group", c, lg), [0, 1],
                   [2 * math.exp(5) / z, 2 * math.exp(0) / z])

    def test_deepseek_v3(self):
        s = np.array([0.9, 0.1, 0.62, 0.58, 0.55, 0.5, 0.2, 0.2])
        lg = np.log(s / (1 - s))
        bias = np.array([0, 0, 0, 0, 0.1, 0, 0, 0.0])
        c = cfg(num_experts_per_tok=2, n_group=4, topk_group=2, routed_scaling_factor=2.5,
                norm_topk_prob=True)
        # group scores (top-2 sums with bias): 1.0, 1.2, 1.15, 0.4: groups 1 and 2 kept (a
        # max-based choice would keep group 0); choice 0.62, 0.58, 0.65, 0.5 -> experts 4, 2;
        # weights from the scores without the bias.
        got = self.route("deepseek_v3", c, lg, bias=bias)
        self.check(got, [2, 4], [2.5 * 0.62 / (0.62 + 0.55), 2.5 * 0.55 / (0.62 + 0.55)])
        # Kimi-K2: one group, the bias still picks.
        c.update(n_group=1, topk_group=1, routed_scaling_factor=2.827)
        got = self.route("kimi_k2", c, lg, bias=np.array([0, 0, 0, 0, 0.5, 0, 0, 0.0]))
        self.check(got, [0, 4], [2.827 * 0.9 / (0.9 + 0.55), 2.827 * 0.55 / (0.9 + 0.55)])

    def test_gpt_oss_router(self):
        lg = [1.0, 3.0, 2.0, 0.0]
        got = self.route("gpt_oss", cfg(num_experts_per_tok=2), lg,
                         gate_bias=np.array([0.0, 0.0, 0.0, 2.5]))
        # biased logits 1, 3, 2, 2.5: top 3 and 2.5, softmax over just those two
        a, b = math.exp(3), math.exp(2.5)
        self.check(got, [1, 3], [a / (a + b), b / (a + b)])

    def test_gpt_oss_expert(self):
        # H=1, F=2: gate_up columns interleaved [g0, u0, g1, u1]
        w = {"gate_up": np.array([[[10.0, -9.0, -2.0, 3.0]]]), "gate_up_bias": np.zeros((1, 4)),
             "down": np.array([[[1.0], [1.0]]]), "down_bias": np.array([[0.25]])}
        y, clamped = mr.gpt_oss_expert(np.array([[1.0]]), w, 0, 7.0)
        sig = lambda v: 1 / (1 + math.exp(-v))  # noqa: E731
        want = (-7 + 1) * 7 * sig(7 * 1.702) + (3 + 1) * -2 * sig(-2 * 1.702) + 0.25
        self.assertAlmostEqual(y[0, 0], want, places=12)
        self.assertEqual(clamped, 2)

    def test_shared_experts(self):
        H = 4
        rng = np.random.default_rng(1)
        mlp = lambda F: {"gate": rng.standard_normal((F, H)), "up": rng.standard_normal((F, H)),  # noqa
                         "down": rng.standard_normal((H, F))}
        x = rng.standard_normal((3, H))
        w = {"gate": np.zeros((2, H)), "experts": [mlp(2), mlp(2)], "shared": mlp(3),
             "shared_gate": rng.standard_normal((1, H))}
        w["gate"][0, 0] = 50.0
        x[:, 0] = 1.0  # expert 0 always, weight ~1 after softmax over [50, 0]... top-1
        c = cfg(num_experts_per_tok=1, norm_topk_prob=True, num_experts=2)
        y = mr.moe_block("qwen2_moe", c, w, x, {})
        sg = 1 / (1 + np.exp(-(x @ w["shared_gate"].T)))
        want = mr.swiglu_mlp(x, w["experts"][0]) + sg * mr.swiglu_mlp(x, w["shared"])
        np.testing.assert_allclose(y, want, rtol=1e-12)
        c = cfg(num_experts_per_tok=1, topk_method="greedy", routed_scaling_factor=3.0,
                norm_topk_prob=False, n_routed_experts=2)
        y = mr.moe_block("deepseek_v2", c, w, x, {})
        p0 = np.exp(50 * x[:, :1]) / (np.exp(50 * x[:, :1]) + 1)
        want = 3 * p0 * mr.swiglu_mlp(x, w["experts"][0]) + mr.swiglu_mlp(x, w["shared"])
        np.testing.assert_allclose(y, want, rtol=1e-12)


class Layers(unittest.TestCase):
    def test_rules(self):
        q = {"architectures": ["Qwen3MoeForCausalLM"], "num_hidden_layers": 6, "num_experts": 8,
             "decoder_sparse_step": 2, "mlp_only_layers": [3]}
        self.assertEqual(mr.moe_layers(q), [1, 5])
        q.update(decoder_sparse_step=1, mlp_only_layers=[0])
        self.assertEqual(mr.moe_layers(q), [1, 2, 3, 4, 5])
        d = {"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 7, "first_k_dense_replace": 3,
             "moe_layer_freq": 1}
        self.assertEqual(mr.moe_layers(d), [3, 4, 5, 6])
        d["moe_layer_freq"] = 2
        self.assertEqual(mr.moe_layers(d), [4, 6])
        self.assertEqual(mr.moe_layers({"architectures": ["MixtralForCausalLM"], "num_hidden_layers": 2}), [0, 1])


EXPERT_NAMES = {
    "mixtral": ["block_sparse_moe.gate.weight", "block_sparse_moe.experts.%d.w1.weight",
                "block_sparse_moe.experts.%d.w2.weight", "block_sparse_moe.experts.%d.w3.weight"],
    "qwen2_moe": ["mlp.gate.weight", "mlp.experts.%d.gate_proj.weight",
                  "mlp.shared_expert.up_proj.weight", "mlp.shared_expert_gate.weight"],
    "qwen3_moe": ["mlp.gate.weight", "mlp.experts.%d.down_proj.weight"],
    "deepseek_v2": ["mlp.gate.weight", "mlp.experts.%d.up_proj.weight",
                    "mlp.shared_experts.gate_proj.weight"],
    "deepseek_v2_group": ["mlp.gate.weight", "mlp.shared_experts.down_proj.weight"],
    "deepseek_v3": ["mlp.gate.weight", "mlp.gate.e_score_correction_bias",
                    "mlp.experts.%d.gate_proj.weight", "mlp.shared_experts.gate_proj.weight"],
    "kimi_k2": ["mlp.gate.e_score_correction_bias", "mlp.experts.%d.gate_proj.weight"],
    "gpt_oss": ["mlp.router.weight", "mlp.router.bias", "mlp.experts.gate_up_proj",
                "mlp.experts.gate_up_proj_bias", "mlp.experts.down_proj",
                "mlp.experts.down_proj_bias"],
}


class Checkpoints(unittest.TestCase):
    """Every family's directory, as make_reference.py writes it, read back independently."""

    def make(self, d, family, dtype, *extra):
        subprocess.run([sys.executable, os.path.join(HERE, "make_reference.py"), d, family,
                        dtype, "--tokens", "48"] + list(extra), check=True,
                       stdout=subprocess.DEVNULL)
        with open(os.path.join(d, "config.json")) as f:
            c = json.load(f)
        with open(os.path.join(d, "reference.json")) as f:
            info = json.load(f)
        return c, info

    def load_all(self, d):
        idx = os.path.join(d, "model.safetensors.index.json")
        tensors = {}
        if os.path.exists(idx):
            with open(idx) as f:
                index = json.load(f)
            files = sorted(set(index["weight_map"].values()))
            total = 0
            for fn in files:
                t = read_safetensors(os.path.join(d, fn))
                for name, v in t.items():
                    self.assertEqual(index["weight_map"][name], fn)
                    total += len(v[2])
                tensors.update(t)
            self.assertEqual(set(tensors), set(index["weight_map"]))
            self.assertEqual(total, index["metadata"]["total_size"])
        else:
            tensors = read_safetensors(os.path.join(d, "model.safetensors"))
        return tensors

    def test_families(self):
        for family in mr.FAMILIES:
            with self.subTest(family=family), tempfile.TemporaryDirectory() as d:
                c, info = self.make(d, family, "f32", "--shards", "3")
                t = self.load_all(d)
                moe = info["moe_layers"]
                self.assertGreaterEqual(len(moe), 2)
                if family not in ("mixtral", "gpt_oss"):  # these have no dense-layer key
                    dense = [l for l in range(c["num_hidden_layers"]) if l not in moe]
                    self.assertTrue(dense, "no dense layer")
                    self.assertIn("model.layers.%d.mlp.gate_proj.weight" % dense[0], t)
                    self.assertNotIn("model.layers.%d.mlp.gate.weight" % dense[0], t)
                for l in moe:
                    for n in EXPERT_NAMES[family]:
                        name = "model.layers.%d.%s" % (l, n.replace("%d", "%d" % (mr.n_experts(c) - 1)))
                        self.assertIn(name, t)
                self.assertIn("model.layers.0.self_attn.o_proj.weight", t)
                self.assertIn("lm_head.weight", t)
                self.assertGreaterEqual(info["min_margin"], 2e-5)
                self.assertEqual(info["experts_used"], mr.n_experts(c))
                if family == "gpt_oss":
                    self.assertGreater(info["clamped"], 0, "swiglu_limit never reached")
                    E, H, F = mr.n_experts(c), c["hidden_size"], c["intermediate_size"]
                    p = "model.layers.0.mlp.experts."
                    self.assertEqual(t[p + "gate_up_proj"][1], (E, H, 2 * F))
                    self.assertEqual(t[p + "down_proj"][1], (E, F, H))
                x = read_safetensors(os.path.join(d, "input.safetensors"))["input"]
                y = read_safetensors(os.path.join(d, "expected.safetensors"))["output"]
                self.assertEqual(x[:2], ("F32", (48, c["hidden_size"])))
                self.assertEqual(y[:2], x[:2])

    def test_fp8_checkpoint(self):
        with tempfile.TemporaryDirectory() as d:
            c, info = self.make(d, "deepseek_v3", "fp8")
            t = self.load_all(d)
            self.assertEqual(c["quantization_config"]["weight_block_size"], [128, 128])
            F, H = c["moe_intermediate_size"], c["hidden_size"]
            name = "model.layers.1.mlp.experts.3.gate_proj.weight"
            self.assertEqual(t[name][:2], ("F8_E4M3", (F, H)))
            self.assertEqual(t[name + "_scale_inv"][:2], ("F32", (-(-F // 128), -(-H // 128))))
            self.assertGreater(t[name + "_scale_inv"][1][0] * t[name + "_scale_inv"][1][1], 1,
                               "one block only: block indexing untested")
            self.assertEqual(t["model.layers.1.mlp.gate.e_score_correction_bias"][0], "F32")
            # DeepSeek-V3's MTP layer (num_hidden_layers) is in the files and must be ignored
            self.assertIn("model.layers.%d.mlp.experts.0.up_proj.weight" % c["num_hidden_layers"], t)

    def test_mxfp4_checkpoint(self):
        """gpt-oss's release layout: the fused experts as U8 _blocks [E, out, in/32, 16] and
        _scales [E, out, in/32] (gate_up: out = 2F interleaved gate/up rows, in = H; down:
        out = H, in = F), the biases BF16, quant_method mxfp4."""
        with tempfile.TemporaryDirectory() as d:
            c, info = self.make(d, "gpt_oss", "mxfp4")
            t = self.load_all(d)
            self.assertEqual(c["quantization_config"]["quant_method"], "mxfp4")
            E, F, H = c["num_local_experts"], c["intermediate_size"], c["hidden_size"]
            p = "model.layers.0.mlp.experts."
            self.assertEqual(t[p + "gate_up_proj_blocks"][:2], ("U8", (E, 2 * F, H // 32, 16)))
            self.assertEqual(t[p + "gate_up_proj_scales"][:2], ("U8", (E, 2 * F, H // 32)))
            self.assertEqual(t[p + "down_proj_blocks"][:2], ("U8", (E, H, F // 32, 16)))
            self.assertEqual(t[p + "down_proj_scales"][:2], ("U8", (E, H, F // 32)))
            self.assertEqual(t[p + "gate_up_proj_bias"][:2], ("BF16", (E, 2 * F)))
            self.assertNotIn(p + "gate_up_proj", t)
            self.assertEqual(t["model.layers.0.mlp.router.weight"][0], "BF16")

    def test_reference_is_from_stored_weights(self):
        """BF16 and F32 checkpoints from one seed differ in expected output by about BF16's
        rounding: expected follows the stored (rounded) weights, not the F64 draws."""
        with tempfile.TemporaryDirectory() as d:
            self.make(d + "/a", "mixtral", "f32", "--min-margin", "0")
            self.make(d + "/b", "mixtral", "bf16", "--min-margin", "0")
            ya = np.frombuffer(read_safetensors(d + "/a/expected.safetensors")["output"][2], np.float32)
            yb = np.frombuffer(read_safetensors(d + "/b/expected.safetensors")["output"][2], np.float32)
            rel = np.abs(ya - yb).max() / np.abs(ya).max()
            self.assertGreater(rel, 1e-4)
            self.assertLess(rel, 0.1)

    def test_subset(self):
        with tempfile.TemporaryDirectory() as d:
            _, full = self.make(d + "/a", "deepseek_v3", "f32")
            _, sub = self.make(d + "/b", "deepseek_v3", "f32", "--layers", "2,3")
            self.assertEqual(full["layers"], [1, 2, 3])
            self.assertEqual(sub["layers"], [2, 3])
            r = subprocess.run([sys.executable, os.path.join(HERE, "make_reference.py"),
                                d + "/c", "deepseek_v3", "f32", "--layers", "0"],
                               capture_output=True, text=True)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("not a MoE layer", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=1)
