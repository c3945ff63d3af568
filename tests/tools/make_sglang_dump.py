#!/usr/bin/env python3
"""make_sglang_dump.py OUT.pt: SGLang's per_token expert distribution recorder dump
(layouts.sglang_dump) written as SGLang writes it: torch tensors, torch.save
(python/sglang/srt/eplb/expert_distribution.py _dump_to_file). Needs torch.

tests/tools/data/expert_distribution_recorder_1700000000.0_0.pt was made with it (Debian's
python3-torch 1.13.1) so that the built-in reader is checked against torch's own file on
machines without torch:  python3 tests/tools/make_sglang_dump.py tests/tools/data/expert_distribution_recorder_1700000000.0_0.pt
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import layouts  # noqa: E402


def to_torch(obj):
    if hasattr(obj, "dtype") and hasattr(obj, "shape"):
        return torch.from_numpy(obj.copy())
    if isinstance(obj, dict):
        return {k: to_torch(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [to_torch(v) for v in obj]
    return obj


def write(path, dump):
    torch.save(to_torch(dump), path)


if __name__ == "__main__":
    dump, _ = layouts.sglang_dump()
    write(sys.argv[1], dump)
