"""One rank of the TP test: generate with each architecture and (rank 0) save tokens + logits.

Run as ``python -m torch.distributed.run --nproc-per-node N tests/local_runner/tp_worker.py
ARCHS_JSON OUT``; ARCHS_JSON is a list of Architecture dicts."""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist

from idealized_runtime.core.types import Architecture
from idealized_runtime.local_runner.generate import Generator
from idealized_runtime.local_runner.parallel import init_from_env


def run(arch: Architecture, tp) -> dict[str, torch.Tensor]:
    generator = Generator(arch, max_batch_size=2, max_seq_len=64, tensor_parallel=tp, seed=3)
    prompt = torch.randint(0, arch.vocab_size, (2, 12), generator=torch.Generator().manual_seed(5))
    tokens = generator.generate(prompt, 8)
    logits = generator.logits(torch.cat([prompt, tokens[:, :-1]], dim=1))
    return {"tokens": tokens, "logits": logits}


def main() -> None:
    archs = [Architecture(**entry) for entry in json.loads(sys.argv[1])]
    tp, _device = init_from_env("cpu")
    results = {arch.name: run(arch, tp) for arch in archs}
    if tp.rank == 0:
        torch.save(results, sys.argv[2])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
