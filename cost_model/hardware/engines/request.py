"""One request (the deployment's batch of identical sequences, sent together to an idle engine)
through an engine's steps: the engine's request path to the scheduler (HTTP, tokenization:
``request_path``) and any fitted request overhead, its prompts read in steps of the engine's
token budget (in chunks, or whole prompts for engines that do not chunk), then one decode step
per token (fewer with speculative decoding), each timed by the engine's step model, and each
token's way back to the client (detokenization, the streamed chunk). An idle engine takes the
request in as it arrives: no wait for a step boundary.

``request_times`` gives the time to the first token and to the last; ``estimate --stack vllm``
and the REST API's hardware-model estimate report them.
"""

from __future__ import annotations

import math

import numpy as np

from idealized_runtime.core.scheduling import prompt_chunks
from idealized_runtime.cost_model.hardware.engines.step import EngineStepModel


def prompt_steps(model: EngineStepModel, prompts: int, prompt_tokens: int) -> float:
    """Seconds to read ``prompts`` prompts of ``prompt_tokens`` tokens, in the engine's steps."""
    scheduler = model.scheduler
    left = [prompt_tokens] * prompts
    seconds = 0.0
    while left:
        if scheduler.chunked_prefill:
            sizes = prompt_chunks(0, left, scheduler.token_budget)
        else:  # whole prompts within the budget (one alone when it exceeds it)
            sizes, budget = [], scheduler.token_budget
            for prompt in left:
                if sizes and prompt > budget:
                    break
                sizes.append(prompt)
                budget -= prompt
        read = [prompt_tokens - n for n in left[: len(sizes)]]  # tokens already cached
        attended = sum(n * done + n * (n + 1) / 2 for n, done in zip(sizes, read, strict=True))
        step = model.seconds(0.0, 0.0, float(sum(sizes)), attended, float(len(sizes)))
        seconds += float(np.asarray(step).reshape(-1)[0])
        left = [n - s for n, s in zip(left, sizes, strict=False)] + left[len(sizes) :]
        left = [n for n in left if n > 0]
    return seconds


def request_times(
    model: EngineStepModel, prompt_tokens: int, output_tokens: int
) -> tuple[float, float]:
    """(seconds to the first token, seconds to the last) of ``model.deployment.batch_size``
    identical requests sent together to an idle engine."""
    batch = model.deployment.batch_size
    path = model.scheduler.request_path
    layers = model.deployment.architecture.num_layers
    first = model.scheduler.residual_overhead_s(layers) + path.first_token_s(
        prompt_tokens, prompt_steps(model, batch, prompt_tokens)
    )
    spec = model.deployment.speculative
    rate = spec.tokens_per_step if spec is not None else 1.0
    steps = math.ceil(max(output_tokens - 1, 0) / rate - 1e-9)
    if steps == 0:
        return first, first
    context = prompt_tokens + rate * np.arange(steps, dtype=np.float64)  # cached per sequence
    zeros = np.zeros(steps)
    decode = model.seconds(np.full(steps, float(batch)), batch * (context + 1), zeros, zeros, zeros)
    return first, first + float(np.sum(decode))
