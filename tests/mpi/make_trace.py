#!/usr/bin/env python3
"""make_trace.py OUT --layers 0,1 --experts E --top-k K --rows R --step T [--seed S]:
a moed-routing/1 trace (docs/routing.md) written with the standard library only (no numpy,
no safetensors package): in each layer one hot expert, a different one per layer, chosen
by most tokens in the first half of each step of T tokens and by few in the second half;
weights uniform 1/K. For the tests of `moed plan --routing`."""
import argparse
import json
import random
import struct
from array import array


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", default="0,1")
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--step", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    layers = [int(x) for x in a.layers.split(",")]
    rnd = random.Random(a.seed)
    tensors = []
    for li, layer in enumerate(layers):
        ids, ws = array("i"), array("f")
        hot = (3 * li + 1) % a.experts
        for r in range(a.rows):
            w = [1.0] * a.experts
            w[hot] = 12.0 if r % a.step < a.step // 2 else 1.0
            row = []
            while len(row) < a.top_k:
                e = rnd.choices(range(a.experts), weights=w)[0]
                if e not in row:
                    row.append(e)
            ids.extend(row)
            ws.extend([1.0 / a.top_k] * a.top_k)
        tensors.append(("layers.%d.topk_ids" % layer, "I32", ids))
        tensors.append(("layers.%d.topk_weights" % layer, "F32", ws))
    header = {"__metadata__": {
        "format": "moed-routing/1", "num_experts": str(a.experts), "top_k": str(a.top_k),
        "tokens_per_step": str(a.step), "layers": json.dumps(layers), "family": "",
        "source": "tests/mpi/make_trace.py", "weights": "uniform"}}
    offset, blobs = 0, []
    for name, dtype, data in tensors:
        if struct.pack("=i", 1) != struct.pack("<i", 1):
            data.byteswap()  # safetensors is little-endian
        raw = data.tobytes()
        header[name] = {"dtype": dtype, "shape": [a.rows, a.top_k],
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(a.out, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


if __name__ == "__main__":
    main()
