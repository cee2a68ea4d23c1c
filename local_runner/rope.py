"""YaRN RoPE frequencies (Peng et al. 2023, "YaRN: Efficient Context Window Extension"), as
DeepSeek-V3 and gpt-oss configure them. Kept apart from the model so the plain path stays plain."""

from __future__ import annotations

import math

import torch

from idealized_runtime.core.types import RopeScaling


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's attention temperature: 1 + 0.1 * mscale * ln(factor) for factor > 1."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def yarn_attention_factor(scaling: RopeScaling) -> float:
    """What cos and sin are multiplied by (so each score by its square)."""
    if scaling.attention_factor is not None:
        return scaling.attention_factor
    if scaling.mscale and scaling.mscale_all_dim:
        return yarn_mscale(scaling.factor, scaling.mscale) / yarn_mscale(
            scaling.factor, scaling.mscale_all_dim
        )
    return yarn_mscale(scaling.factor)


def yarn_softmax_scale(scaling: RopeScaling | None) -> float:
    """DeepSeek's extra softmax scale: mscale(factor, mscale_all_dim) ** 2 (1 without it)."""
    if scaling is None or not scaling.mscale_all_dim:
        return 1.0
    return yarn_mscale(scaling.factor, scaling.mscale_all_dim) ** 2


def yarn_inv_freq(rotary_dim: int, theta: float, scaling: RopeScaling, device) -> torch.Tensor:
    """Inverse frequencies [rotary_dim / 2]: dimensions that turn more than beta_fast times over
    the original context keep their frequency, those turning fewer than beta_slow times are
    interpolated by ``factor``, with a linear ramp in between."""

    def dimension(rotations: float) -> float:  # the dimension that turns this many times
        turns = scaling.original_max_context / (rotations * 2 * math.pi)
        return rotary_dim * math.log(turns) / (2 * math.log(theta))

    low, high = dimension(scaling.beta_fast), dimension(scaling.beta_slow)
    if scaling.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, rotary_dim - 1)
    if low == high:
        high += 0.001  # a step, not a division by zero
    half = rotary_dim // 2
    ramp = ((torch.arange(half, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    keep = (1 - ramp).to(device)  # 1: extrapolate (original frequency), 0: interpolate
    base = theta ** (
        torch.arange(0, rotary_dim, 2, device=device, dtype=torch.float32) / rotary_dim
    )
    return (1 - keep) / (scaling.factor * base) + keep / base
