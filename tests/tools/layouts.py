"""The routing records of vLLM and SGLang, built with NumPy the way those engines' own code
builds them (each function cites the file and function it follows), from known per-token
expert choices. Shared by test_import.py and make_sglang_dump.py."""

import base64

import numpy as np


def choices(rng, tokens, num_layers, moe_layers, num_experts, top_k):
    """Known routing: [tokens, num_layers, top_k] distinct expert ids per token in each MoE
    layer, and the list of MoE layers."""
    out = np.zeros((tokens, num_layers, top_k), dtype=np.int32)
    for l in moe_layers:
        for t in range(tokens):
            out[t, l] = rng.choice(num_experts, size=top_k, replace=False)
    return out


class VllmEngine:
    """vLLM's capture path for --enable-return-routed-experts, in NumPy:
    vllm/model_executor/layers/fused_moe/routed_experts_capturer.py (RoutedExpertsCapturer.
    init_buffer / capture / save_captured_experts / clear_buffer, RoutedExpertsReader.
    get_routed_experts) and vllm/v1/core/sched/scheduler.py (Scheduler._get_routed_experts:
    slot_mapping from the request's KV blocks, num_tokens = request.num_tokens - 1)."""

    def __init__(self, num_layers, top_k, max_num_batched_tokens, num_blocks, block_size):
        # init_buffer: device [max_num_batched_tokens, num_hidden_layers, num_experts_per_tok]
        # int32 zeros; shared host buffer [max_num_kv_tokens, layers, k] filled with 0.
        self.device = np.zeros((max_num_batched_tokens, num_layers, top_k), dtype=np.int32)
        self.block_size = block_size
        self.host = np.zeros(((num_blocks + 1) * block_size, num_layers, top_k), dtype=np.int32)
        self.free_blocks = list(range(num_blocks))[::-1]

    def step(self, scheduled, moe_layers):
        """One forward pass: scheduled is [(request, first token, count)]; each MoE layer
        captures the batch's topk_ids (capture: device[:n, layer, :] = topk_ids), then the
        model runner saves them at the tokens' KV slots (save_captured_experts)."""
        slots, rows = [], []
        for req, first, count in scheduled:
            for t in range(first, first + count):
                blk = t // self.block_size
                while blk >= len(req["blocks"]):
                    req["blocks"].append(self.free_blocks.pop())
                slots.append(req["blocks"][blk] * self.block_size + t % self.block_size)
                rows.append(req["truth"][t])
        n = len(rows)
        batch = np.stack(rows)
        for l in moe_layers:
            self.device[:n, l, :] = batch[:, l, :]
        self.host[np.array(slots), :, :] = self.device[:n, :, :]
        self.device[...] = 0  # clear_buffer before the next pass

    def routed_experts(self, req):
        """Scheduler._get_routed_experts: the finished request's CompletionOutput.
        routed_experts."""
        num_tokens = req["num_tokens"] - 1
        block_ids = np.array(req["blocks"], dtype=np.int32)
        offsets = np.arange(0, self.block_size)
        slot_mapping = (offsets.reshape((1, self.block_size)) +
                        block_ids.reshape((len(block_ids), 1)) * self.block_size
                        ).flatten()[:num_tokens]
        return self.host[slot_mapping, :, :].copy()


def vllm_requests(seed=1, num_layers=4, moe_layers=(1, 3), num_experts=8, top_k=2):
    """Two requests run together (chunked prefill, then decode), as vLLM schedules them.
    Returns ([routed_experts of each request], [the known choices of its tokens])."""
    rng = np.random.default_rng(seed)
    eng = VllmEngine(num_layers, top_k, max_num_batched_tokens=16, num_blocks=32, block_size=4)
    reqs = []
    for prompt, output in ((11, 5), (6, 4)):
        n = prompt + output  # request.num_tokens once finished
        reqs.append({"prompt": prompt, "num_tokens": n, "blocks": [],
                     "truth": choices(rng, n, num_layers, moe_layers, num_experts, top_k)})
    a, b = reqs
    eng.step([(a, 0, 8), (b, 0, 6)], moe_layers)           # a: prefill chunk, b: prefill
    eng.step([(a, 8, 3), (b, 6, 1)], moe_layers)           # a: rest of prefill, b: decode
    for i in range(4):                                     # decodes; a's last sampled token
        eng.step([(a, 11 + i, 1)] + ([(b, 7 + i, 1)] if i < 2 else []), moe_layers)
    # (a: 15 of 16 tokens ran; b: 9 of 10) - the last sampled token never goes through.
    outs = [eng.routed_experts(r) for r in reqs]
    truths = [r["truth"][:r["num_tokens"] - 1] for r in reqs]
    return outs, truths


def sglang_responses(seed=2, num_layers=4, moe_layers=(1, 2), num_experts=8, top_k=2):
    """/generate responses with "return_routed_experts": true: meta_info["routed_experts"] is
    base64 of the int32 bytes of [seqlen - 1, num_hidden_layers, num_experts_per_tok]
    (python/sglang/srt/state_capturer/base.py BaseTopkCapturer.get_topk, host buffer zeroed;
    the detokenizer's base64; routed_experts.py extract_routed_experts_from_meta_info decodes
    it with np.frombuffer(..., dtype=np.int32)). Returns (responses, known choices)."""
    rng = np.random.default_rng(seed)
    resps, truths = [], []
    for i, seqlen in enumerate((9, 5, 12)):
        t = choices(rng, seqlen - 1, num_layers, moe_layers, num_experts, top_k)
        resps.append({"text": f"response {i}",
                      "meta_info": {"id": f"req{i}", "prompt_tokens": seqlen - 3,
                                    "completion_tokens": 3, "finish_reason": {"type": "length"},
                                    "routed_experts": base64.b64encode(
                                        t.astype(np.int32).tobytes()).decode("utf-8")}})
        truths.append(t)
    return resps, truths


SGLANG_TOP_K_SLOTS = 8  # _DetailSinglePassGatherer._TOP_K_NUM


def sglang_dump(seed=3, num_layers=4, moe_layers=(1, 2, 3), num_experts=8, top_k=4):
    """The per_token expert distribution recorder's dump as NumPy (torch tensors in the real
    file): python/sglang/srt/eplb/expert_distribution.py. _DetailSinglePassGatherer keeps
    _topk_ids_of_layer int32 [num_layers, chunked_prefill_size * 8, 8], reset to -1 before
    each forward pass; on_select_experts writes [layer, :tokens, :top_k] = topk_ids (physical
    ids: topk.py maps logical to physical first); collect() returns dict(input_ids, positions,
    extend_seq_lens, forward_mode, topk_ids_of_layer=[:, :tokens, :], misc_objects,
    global_physical_count); _DetailAccumulator.append adds forward_pass_id, rank,
    gatherer_key; dump() saves dict(records, last_physical_to_logical_map).
    Physical experts: 8 logical plus 2 redundant copies (EPLB), so ids must be mapped back.
    Returns (the dump, known logical choices [tokens, num_layers, top_k] in record order)."""
    rng = np.random.default_rng(seed)
    num_physical = num_experts + 2
    p2l = np.tile(np.concatenate([np.arange(num_experts), [2, 5]]), (num_layers, 1))
    l2p = {e: [int(p) for p in np.flatnonzero(p2l[0] == e)] for e in range(num_experts)}
    records, truths = [], []
    passes = [("extend", [5, 7]), ("decode", [1, 1]), ("idle", []), ("decode", [1, 1]),
              ("extend", [4])]
    for pass_id, (mode, lens) in enumerate(passes):
        n = sum(lens)
        buf = np.full((num_layers, 64, SGLANG_TOP_K_SLOTS), -1, dtype=np.int32)  # reset()
        truth = choices(rng, n, num_layers, moe_layers, num_experts, top_k)
        for l in moe_layers:
            phys = np.vectorize(lambda e: rng.choice(l2p[int(e)]))(truth[:, l, :]) if n else \
                np.zeros((0, top_k), dtype=np.int32)
            buf[l, :n, :top_k] = phys  # on_select_experts
        count = np.zeros((num_layers, num_physical), dtype=np.int32)
        for l in moe_layers:
            np.add.at(count[l], buf[l, :n, :top_k].reshape(-1), 1)
        records.append(dict(forward_pass_id=pass_id, rank=0, gatherer_key="primary",
                            input_ids=[int(x) for x in rng.integers(0, 1000, n)],
                            positions=[int(x) for x in range(n)],
                            extend_seq_lens=lens if mode == "extend" else None,
                            forward_mode={"extend": 1, "decode": 2, "idle": 6}[mode],
                            topk_ids_of_layer=buf[:, :n, :].copy(), misc_objects=[],
                            global_physical_count=count))
        truths.append(np.where(truth >= 0, truth, -1))
    truth = np.concatenate(truths)
    for l in range(num_layers):
        if l not in moe_layers:
            truth[:, l, :] = -1
    return dict(records=records, last_physical_to_logical_map=p2l.astype(np.int64)), truth
