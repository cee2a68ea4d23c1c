"""The weight-only quantizer replaces parameters named ``*_weight`` (and ``lm_head``) by objects
that only take part in torch's function dispatch (``__torch_function__``): DeepSeek-V3's and
gpt-oss's matmul weights carry such names and the model reaches them only through torch
functions (F.linear, bmm, reshape) and expert indexing, so a stand-in of that kind gives the
same logits."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from idealized_runtime.core.architectures import architecture_from_hf_config
from idealized_runtime.local_runner.model import build_model
from tests.test_architectures import TINY

FAMILIES = ["deepseek_v3", "gpt_oss"]
# Parameters that stay dense by design: lookups, norms, routers, biases, sinks.
DENSE_LEAVES = ("embed", "router", "sinks")


class DispatchOnly:
    """Holds a weight the way a quantized one is held: not a Tensor, no attribute access beyond
    shape/dim/indexing; torch functions see the dense tensor. Records F.linear uses."""

    linear_calls = 0

    def __init__(self, dense: torch.Tensor) -> None:
        self.dense, self.shape, self.dtype, self.device = (
            dense,
            dense.shape,
            dense.dtype,
            dense.device,
        )

    def dim(self) -> int:
        return self.dense.dim()

    def __getitem__(self, index: Any) -> DispatchOnly:
        return DispatchOnly(self.dense[index])

    @classmethod
    def __torch_function__(
        cls, func: Callable, types: Any, args: Sequence[Any] = (), kwargs: Any = None
    ) -> Any:
        if func is F.linear:
            cls.linear_calls += 1

        def dense(value: Any) -> Any:
            return value.dense if isinstance(value, DispatchOnly) else value

        return func(*map(dense, args), **{k: dense(v) for k, v in (kwargs or {}).items()})


def _is_matmul_weight(leaf: str, param: torch.Tensor) -> bool:
    return param.dim() in (2, 3) and leaf not in DENSE_LEAVES and not leaf.endswith("_bias")


@pytest.mark.parametrize("family", FAMILIES)
def test_matmul_weights_are_named_for_the_quantizer(family: str) -> None:
    model = build_model(architecture_from_hf_config(TINY[family], name=family))
    for name, param in model.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        if _is_matmul_weight(leaf, param):
            assert leaf.endswith("_weight") or leaf == "lm_head", name


@pytest.mark.parametrize("family", FAMILIES)
def test_weights_reached_only_through_torch_functions(family: str) -> None:
    model = build_model(architecture_from_hf_config(TINY[family], name=family))
    model.setup_cache(max_batch_size=2, max_seq_len=32)
    tokens = torch.randint(0, 128, (2, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = model(tokens, torch.arange(12), 12)
        expected_step = model(tokens[:, -1:], torch.tensor([12]), 13)
        replaced = 0
        for module in list(model.modules()):
            for leaf, param in list(module.named_parameters(recurse=False)):
                if _is_matmul_weight(leaf, param) and leaf != "lm_head":
                    del module._parameters[leaf]
                    object.__setattr__(module, leaf, DispatchOnly(param.data))
                    replaced += 1
        DispatchOnly.linear_calls = 0
        prefill = model(tokens, torch.arange(12), 12)
        step = model(tokens[:, -1:], torch.tensor([12]), 13)  # decode: MLA's absorbed path
    assert replaced > 0 and DispatchOnly.linear_calls > 0
    assert torch.equal(prefill, expected) and torch.equal(step, expected_step)
