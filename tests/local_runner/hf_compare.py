"""One comparison for the runner-vs-transformers tests: logits of a full forward pass and of a
prompt followed by single-token cached decode steps, against transformers' own model."""

from __future__ import annotations

from typing import Any

import torch

from idealized_runtime.core.architectures import architecture_from_hf_config
from idealized_runtime.core.types import Architecture
from idealized_runtime.local_runner.hf_config import load_hf_state_dict
from idealized_runtime.local_runner.model import build_model
from tests.local_runner.test_hf_equivalence import TOLERANCE, _hf_model

SEQ, PROMPT = 20, 12


def assert_matches_transformers(
    config: Any, raw: dict[str, Any] | None = None, name: str = "case"
) -> tuple[Architecture, torch.Tensor, Any]:
    """``raw``: the dict the runner loads (default: ``config.to_dict()``). Returns the
    architecture, the expected logits and the HF model for further checks."""
    hf = _hf_model(config)
    arch = architecture_from_hf_config(raw if raw is not None else config.to_dict(), name=name)
    model = build_model(arch)
    model.setup_cache(max_batch_size=2, max_seq_len=32)
    interleave = getattr(config, "rope_interleave", True)
    load_hf_state_dict(model, hf.state_dict(), arch.family, rope_interleave=interleave)
    tokens = torch.randint(0, 128, (2, SEQ), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(tokens).logits
        ours = model(tokens, torch.arange(SEQ), SEQ)
        model(tokens[:, :PROMPT], torch.arange(PROMPT), PROMPT)
        stepped = [
            model(tokens[:, i : i + 1], torch.tensor([i]), i + 1) for i in range(PROMPT, SEQ)
        ]
    assert (ours - expected).abs().max().item() < TOLERANCE
    assert (torch.cat(stepped, 1) - expected[:, PROMPT:]).abs().max().item() < TOLERANCE
    return arch, expected, hf
