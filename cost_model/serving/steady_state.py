"""A fast estimate of the simulator's steady state: what ``simulate`` gives for a closed loop of
C clients, without simulating the requests one by one.

The plan (``cost_model.planning``) searches thousands of (deployment, load) points; the
discrete-event simulator takes about a second for one level of a few hundred requests, this
estimate about a millisecond (all load levels of a deployment in a few vectorized calls of the
same step-time model). The plan searches with it and simulates its answer with ``simulate``;
``tests/cost_model/test_steady_state.py`` and ``benchmarks/plan_speed.py`` measure how far the
two apart are.

The server is the simulator's (same ``StepTime``, same ``ServerConfig``): n = min(C, max batch,
KV cache / (prompt + output)) requests run, the other C - n wait for a slot. Per request: the
prompt's new tokens p' (prompt less its cached prefix) in chunks of the step's budget, then
D = ceil((o - 1) / tokens per step) decode steps. Closed-loop clients resubmit the instant a
request ends, so a prompt arrives at a step boundary and joins the next step (after the
engine's request path h: front end, tokenization, the first token's delivery, and on a busy
engine the wait for the scheduler: half a step when h puts the request mid-step, one step more
for a scheduler that plans a step ahead; it holds no slot and adds to the TTFT). With the
throughput X (requests/s) the steady state satisfies Little's law, n = X x (time in the server),
and is found by a damped fixed-point iteration on X:

- decode first (vLLM, TensorRT-LLM): every step carries all d = X D t decoding sequences
  (t: the mean step), and a fraction f of the steps also prompt tokens, q per step:
  f = 1 - exp(-X t c) (prompts arrive at about X t per step, each needing c chunk steps),
  q = X p' t / f, within the budget left after the decode tokens. The mean step is f t_mixed +
  (1 - f) t_decode; TTFT in the server is c mixed steps; TPOT is D mean steps / (o - 1). An
  engine without chunked prefill admits a whole prompt only into what the decode tokens leave
  of the budget, so at most budget - p' sequences decode while prompts wait.
- prefill first (SGLang): waiting prompts run in steps of their own while the decoders wait:
  after a decode step in which requests ended (probability 1 - exp(-X t_decode)), their m
  resubmitted prompts run together; a decoder's step costs t_decode plus that share of the
  prompt steps.

Either way the prompts bound the throughput where outputs are short: X p' is at most the prompt
tokens of steps filled with them (what the budget leaves beside d decoders in a step of
t_mixed; steps of the whole budget between the decode steps), clients beyond it queue for the
prompt steps, and that wait is TTFT's.

Disaggregated (``disaggregated_steady_state``): each prefill instance serves X / x prompts/s in
steps of the prompts waiting (its utilization adds the mean wait), the KV transfer
(``kv_transfer_seconds``) follows, and each decode instance holds d = X / y x D x t_decode(d)
sequences; X follows from C = X (TTFT + D t_decode). Clients beyond what the pools serve wait in
front of the one that bounds X: at a prefill instance before their first token, for a decode
slot after it (the first token comes with the prompt and the transfer), so that wait is TPOT's.

Closed-loop clients are not Poisson arrivals. With requests of the same lengths
(``MeanRequest.same_lengths``) the clients all start at t = 0; where the engine ends their
requests on the same step they stay in step, each turn one burst of prompts then decoding
together (``_lockstep``). On a decode-first engine (vLLM, TensorRT-LLM) the requests of a
turn end a step or so apart; the ones ending before the first one's next prompt reaches the
scheduler (after the request path's delay: front end, tokenization, delivery, and a scheduler
that plans a step ahead) send their next prompts together and the turn's prompts queue in one
line, in chunks or, without chunked prefill, as many whole prompts a step as fit; the later
ones send while a step of the line runs and wait for it (``_clustered_line``). Without such a
delay the ends stagger, prompts reach the scheduler one after another and every step is full
(``_full_steps``). A prefill instance receives the first burst's groups together on every turn
where every decode instance holds as many requests (their steps last alike), else one by one.
With lengths spread a little (``MeanRequest.length_cv2``) each client's cycle varies by sigma:
the arrivals at the prefill instances form a lattice perturbed by sigma, nearly even where
sigma is small beside the gap between two arrivals and nearly Poisson where it is larger, and
no backlog outgrows what crosses a window's ends; the median wait follows (``_prefill_wait``).

What the estimate leaves out: the drain of the first burst over a finite run (every client's
first request arrives at t = 0; where a prefill instance's line of first prompts outlasts the
first requests' decoding, the next turns queue behind it and it drains over several turns as
the decode pool fills and its steps lengthen), the preemptions of an engine that admits more
requests than its KV cache holds to their end (vLLM, SGLang) and recomputes them, the
spread of the lengths (it takes their means) and FCFS waits for the KV cache beyond the mean,
and the way a request overhead spreads resubmissions over the steps under load. Medians from
``simulate`` are the figures to compare it to (``benchmarks/estimate_vs_simulator.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import Deployment
from idealized_runtime.cost_model.serving.disaggregated import Server, kv_transfer_seconds
from idealized_runtime.cost_model.serving.step_time import StepWork

ITERATIONS = 40
TURNS = 4  # turns of clients in step followed until their requests end as the turn before
DAMPING = 0.5
TOLERANCE = 1e-4  # relative change of the throughput at which the iteration stops


@dataclass(frozen=True)
class MeanRequest:
    """The workload's mean request: prompt tokens, of which ``cached_tokens`` are found in the
    prefix cache, and output tokens."""

    prompt_tokens: float
    output_tokens: float
    cached_tokens: float = 0.0
    # The longest prompt's new tokens (None: the mean's; the lengths are taken as spread evenly
    # between as far below the mean and the longest): engines that admit only whole prompts
    # stall on the long ones (see ``_waves``).
    longest_new_tokens: float | None = None
    # Every request of the same lengths (and none cached): closed-loop clients that start
    # together then stay in step wherever the engine ends their requests on the same step
    # (see ``_lockstep``).
    same_lengths: bool = False
    # The squared coefficient of variation of the lengths (uniform between a fraction f and
    # 1 of the stated: (1 - f)^2 / (3 (1 + f)^2)): closed-loop clients' cycles vary as much,
    # which sets how evenly they arrive at a prefill instance and how long prompts queue there
    # (``_prefill_wait``; None: the M/D/1-like wait).
    length_cv2: float | None = None

    def __post_init__(self) -> None:
        if not (self.prompt_tokens >= 1 and self.output_tokens >= 1):
            raise InputError("a request needs at least one prompt and one output token")
        if not 0 <= self.cached_tokens <= self.prompt_tokens - 1:
            raise InputError("cached prompt tokens must be in [0, prompt tokens - 1]")

    @property
    def new_tokens(self) -> float:
        return self.prompt_tokens - self.cached_tokens

    @property
    def longest_new(self) -> float:
        return self.new_tokens if self.longest_new_tokens is None else self.longest_new_tokens

    @property
    def sequence_tokens(self) -> float:
        return self.prompt_tokens + self.output_tokens


@dataclass(frozen=True)
class SteadyState:
    """Per load level (arrays): clients, mean TTFT and TPOT, requests/s, and whether a
    request fits the KV cache at all."""

    concurrency: np.ndarray
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    requests_per_s: np.ndarray
    fits: np.ndarray

    def output_tokens_per_s(self, request: MeanRequest) -> np.ndarray:
        return self.requests_per_s * request.output_tokens


def decode_steps(request: MeanRequest, tokens_per_step: float) -> float:
    """Decode steps after the first token (speculative decoding yields more tokens a step)."""
    return float(math.ceil((request.output_tokens - 1) / tokens_per_step - 1e-9))


def _work(decoders: np.ndarray, context: float, prompt: np.ndarray, request: MeanRequest,
          chunk: np.ndarray) -> StepWork:  # fmt: skip
    """Steps of ``decoders`` sequences at ``context`` cached tokens each, and ``prompt`` new
    prompt tokens in chunks of ``chunk`` (their attended positions: the mean of the prompt's)."""
    attended_per_prompt_token = request.cached_tokens + (request.new_tokens + 1) / 2
    chunks = np.where(prompt > 0, prompt / np.maximum(chunk, 1.0), 0.0)
    decode_attended = decoders * (context + 1)
    return StepWork(
        tokens=decoders + prompt,
        attended=decode_attended + prompt * attended_per_prompt_token,
        sequences=decoders + chunks,
        context=decoders * context + chunks * request.cached_tokens,
        decode_sequences=decoders,
        decode_attended=decode_attended,
    )


def _slots(server: Server, request: MeanRequest, clients: np.ndarray) -> tuple[np.ndarray, bool]:
    """Requests running at once, and whether one request fits the KV cache."""
    capacity = server.config.kv_capacity_tokens
    kv_slots = math.inf if capacity is None else capacity // request.sequence_tokens
    slots = np.minimum(np.minimum(clients, server.config.max_batch), kv_slots)
    return np.maximum(slots, 1.0), kv_slots >= 1


def running_requests(server: Server, request: MeanRequest, concurrency: ArrayLike) -> np.ndarray:
    """Requests running at once per load level: min(clients, max batch, KV cache / (prompt +
    output))."""
    clients = np.atleast_1d(np.asarray(concurrency, dtype=np.float64))
    return _slots(server, request, clients)[0]


# Grid points of the tabulated step times (see ``StepTable``).
DECODER_GRID = 24
TOKEN_GRID = 28
EXACT_DECODERS = 1024


class StepTable:
    """One server's step times for one mean request, tabulated once in a few vectorized calls
    of its ``StepTime`` and interpolated after: decode-only steps at every whole number of
    decoders up to ``max_decoders`` (exact: a CUDA graph pads its batch in steps), steps of
    prompt tokens alone, and mixed steps (decoders and prompt tokens) on a grid. The estimate
    iterates on these, so a deployment's load levels cost a few step-time calls in all, and a
    table serves every deployment that shares the server (a decode layout in many xPyD
    pairs)."""

    def __init__(self, server: Server, request: MeanRequest, max_decoders: int) -> None:
        self.server, self.request = server, request
        self.max_decoders = max(int(max_decoders), 1)
        self.context = request.prompt_tokens + (request.output_tokens - 1) / 2
        self.budget = float(server.config.token_budget)
        self._decode: tuple[np.ndarray, np.ndarray] | None = None
        self._prompts: tuple[np.ndarray, np.ndarray] | None = None
        self._mixed: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def share_decode_steps(self, other: StepTable) -> None:
        """Take ``other``'s decode-only steps (tabulated now if need be) when it tabulates the
        same mean request as far: a decode-only step holds no prompt, so the instance's token
        budget, the only thing two such tables may differ in, does not change it."""
        if other.request == self.request and other.max_decoders == self.max_decoders:
            other.decode(np.ones(1))
            self._decode = other._decode

    def _seconds(self, decoders: np.ndarray, prompt: np.ndarray, chunk: np.ndarray) -> np.ndarray:
        work = _work(decoders, self.context, prompt, self.request, chunk)
        return np.asarray(self.server.step_time.seconds(work), dtype=np.float64)

    def chunk(self, decoders: np.ndarray) -> np.ndarray:
        """The prompt chunk a step holds beside ``decoders`` decode tokens."""
        new = self.request.new_tokens
        if self.server.config.chunked_prefill:
            return np.minimum(new, np.maximum(self.budget - decoders, 1.0))
        return new + 0 * decoders

    def decode(self, decoders: np.ndarray) -> np.ndarray:
        """A decode-only step of ``decoders`` sequences (at least one)."""
        if self._decode is None:
            # Every whole batch up to EXACT_DECODERS (a CUDA graph pads its batch in steps),
            # beyond it a geometric grid (the graphs end there; the step grows smoothly).
            whole = np.arange(1, min(self.max_decoders, EXACT_DECODERS) + 1, dtype=np.float64)
            if self.max_decoders > EXACT_DECODERS:
                tail = np.geomspace(EXACT_DECODERS, self.max_decoders, DECODER_GRID)[1:]
                whole = np.concatenate([whole, tail])
            self._decode = whole, self._seconds(whole, 0 * whole, 1 + 0 * whole)
        d = np.clip(decoders, 1.0, self.max_decoders)
        return np.interp(d, *self._decode)

    def prompts(self, tokens: np.ndarray) -> np.ndarray:
        """A step of ``tokens`` prompt tokens alone (chunks of the prompt, within the budget)."""
        if self._prompts is None:
            grid = np.geomspace(1.0, max(self.budget, 2.0), TOKEN_GRID)
            chunk = np.minimum(self.request.new_tokens, self.budget) + 0 * grid
            self._prompts = np.log(grid), self._seconds(0 * grid, grid, chunk)
        return np.interp(np.log(np.maximum(tokens, 1.0)), *self._prompts)

    def mixed(self, decoders: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """A step of ``decoders`` decode tokens and ``tokens`` prompt tokens (bilinear in the
        decoders and the logarithm of the prompt tokens)."""
        if self._mixed is None:
            d_grid = np.unique(np.round(np.geomspace(1.0, self.max_decoders, DECODER_GRID)))
            d_grid = np.concatenate([[0.0], d_grid])
            t_grid = np.geomspace(1.0, self.budget + self.request.new_tokens, TOKEN_GRID)
            d, t = np.meshgrid(d_grid, t_grid, indexing="ij")
            seconds = self._seconds(d.ravel(), t.ravel(), self.chunk(d.ravel()))
            self._mixed = d_grid, np.log(t_grid), seconds.reshape(d.shape)
        d_grid, t_grid, table = self._mixed
        d = np.clip(decoders, 0.0, d_grid[-1])
        t = np.clip(np.log(np.maximum(tokens, 1.0)), t_grid[0], t_grid[-1])
        i = np.clip(np.searchsorted(d_grid, d) - 1, 0, len(d_grid) - 2)
        j = np.clip(np.searchsorted(t_grid, t) - 1, 0, len(t_grid) - 2)
        u = (d - d_grid[i]) / (d_grid[i + 1] - d_grid[i])
        v = (t - t_grid[j]) / (t_grid[j + 1] - t_grid[j])
        return (
            (1 - u) * (1 - v) * table[i, j]
            + u * (1 - v) * table[i + 1, j]
            + (1 - u) * v * table[i, j + 1]
            + u * v * table[i + 1, j + 1]
        )


def step_table(server: Server, request: MeanRequest, concurrency: ArrayLike) -> StepTable:
    """A ``StepTable`` of ``server`` large enough for ``concurrency`` clients."""
    clients = np.atleast_1d(np.asarray(concurrency, dtype=np.float64))
    slots, _ = _slots(server, request, clients)
    return StepTable(server, request, int(np.max(slots)))


def _clients(concurrency: ArrayLike) -> np.ndarray:
    clients = np.atleast_1d(np.asarray(concurrency, dtype=np.float64))
    if np.any(clients < 1):
        raise InputError("concurrency must be >= 1")
    return clients


def aggregated_steady_state(
    server: Server,
    request: MeanRequest,
    concurrency: ArrayLike,
    table: StepTable | None = None,
) -> SteadyState:
    """The steady state of ``concurrency`` closed-loop clients on one aggregated server
    (``table``: its step times, tabulated for at least as many decoders)."""
    clients = _clients(concurrency)
    config = server.config
    table = table or step_table(server, request, clients)
    slots, fits = _slots(server, request, clients)
    decode = decode_steps(request, config.tokens_per_step)
    budget, new = float(config.token_budget), request.new_tokens
    # Outside the server's slots: the request path to the scheduler's queue (front end,
    # tokenization, any fitted overhead), the wait for the scheduler on a busy engine (to the
    # step boundary when the request comes mid-step, plus the steps the scheduler plans ahead)
    # and the first token's delivery (each token's: the client resends after the last).
    path = config.request_path
    before = float(config.to_scheduler_s(request.prompt_tokens))
    waits = path.boundary_wait_steps(mid_step=before > 0)

    def outside(step: np.ndarray, lifetime: np.ndarray) -> np.ndarray:
        """Seconds a request spends on the request path: the wait counts when another
        client's request keeps the engine busy (each is in the server ``lifetime`` of its
        cycle)."""
        cycle = before + path.delivery_s + lifetime
        busy = -np.expm1((clients - 1) * np.log1p(-np.minimum(lifetime / cycle, 1 - 1e-12)))
        return before + path.delivery_s + busy * waits * step

    def prompts_first(x: np.ndarray, d: np.ndarray, mean: np.ndarray) -> tuple[np.ndarray, ...]:
        """(mean step a decoder sees, TTFT in the server) when prompts run on their own."""
        ends = np.maximum(x * mean, 1e-12)  # requests ending per decode step and its prompts
        after = -np.expm1(-ends)  # share of decode steps some request ended in
        prompts = np.maximum(ends / after, 1.0)  # their prompts run together next
        count = np.ceil(prompts * new / budget)
        t_prompts = count * table.prompts(prompts * new / count)
        return table.decode(d) + after * t_prompts, t_prompts

    def decode_first(x: np.ndarray, d: np.ndarray, mean: np.ndarray) -> tuple[np.ndarray, ...]:
        """(mean step, TTFT in the server) when prompt chunks ride along the decode tokens."""
        left = np.maximum(budget - d, 1.0)
        per_prompt = np.ceil(new / left) if config.chunked_prefill else 1.0 + 0 * d
        mixed = -np.expm1(-np.maximum(x * mean * per_prompt, 1e-12))
        tokens = np.clip(x * new * mean / mixed, new / per_prompt, np.maximum(left, new))
        t_mixed = table.mixed(d, tokens)
        return mixed * t_mixed + (1 - mixed) * table.decode(d), per_prompt * t_mixed

    if config.prefill_first:  # a prompt's share of prompt steps of the whole budget
        if new > budget:
            per_prompt = float(table.prompts(np.array([budget]))[0]) * new / budget
        else:
            fit = math.floor(budget / new)
            per_prompt = float(table.prompts(np.array([fit * new]))[0]) / fit

    def prompt_rate(d: np.ndarray) -> np.ndarray:
        """Requests/s the prompts allow beside ``d`` decoders: every step filled with prompt
        tokens (what the budget leaves beside the decoders on a decode-first engine; steps of
        the whole budget between the decode steps on a prefill-first one). Short outputs make
        this the bound: with one output token there is no decoding at all."""
        if config.prefill_first:
            decoding = decode * table.decode(d) / np.maximum(d, 1.0)
            return 1.0 / (per_prompt + decoding)
        left = np.maximum(budget - d, 1.0)
        if config.chunked_prefill:
            return left / (new * table.mixed(d, left))
        whole = np.maximum(np.floor(left / new), 1.0)  # whole prompts a step
        return whole / table.mixed(d, whole * new)

    server_times = prompts_first if config.prefill_first else decode_first
    # Without chunked prefill a whole prompt joins only what the decode tokens leave of the
    # budget, so at most budget - p' sequences decode while prompts wait.
    cap = slots
    if not (config.chunked_prefill or config.prefill_first):
        cap = np.minimum(slots, max(budget - new, 1.0))
    mean = table.decode(cap)
    x = slots / (decode * mean + table.decode(0 * cap + 1))
    first = mean
    for _ in range(ITERATIONS):
        d = np.minimum(x * decode * mean, cap)
        step_mean, first = server_times(x, d, mean)
        mean = mean + DAMPING * (step_mean - mean)
        lifetime = first + decode * mean
        following = np.minimum(slots / lifetime, cap / np.maximum(decode * mean, 1e-12))
        following = np.minimum(following, clients / (outside(mean, lifetime) + lifetime))
        following = np.minimum(following, prompt_rate(d))
        moved = np.abs(following - x) / x
        x = x + DAMPING * (following - x)
        if np.all(moved < TOLERANCE):
            break
    # The throughput of the final step times (the damped iterate lags them a little, and TTFT
    # below is a small difference of large times).
    in_server = decode * mean
    overhead = outside(mean, first + in_server)
    prompts_allow = prompt_rate(np.minimum(x * decode * mean, cap))  # beside the iterate's
    x = np.minimum(slots / (first + in_server), cap / np.maximum(in_server, 1e-12))
    x = np.minimum(x, clients / (overhead + first + in_server))
    x = np.minimum(x, prompts_allow)
    if not (config.chunked_prefill or config.prefill_first):
        x, in_server = _waves(table, slots, x, in_server)
    if request.same_lengths:
        first = _full_steps(table, slots, first, cap)
    # Clients beyond the requests running wait for a slot: C = X x (request path + wait + time
    # in the server); the request path is part of the TTFT a client sees.
    ttft = np.maximum(clients / x - in_server - overhead, first) + overhead
    tpot = in_server / max(request.output_tokens - 1, 1)
    if request.same_lengths:
        steady = _clustered_line(table, clients, slots, decode, overhead, (ttft, tpot, x))
        ttft, tpot, x = _lockstep(table, clients, slots, decode, overhead, steady)
    return SteadyState(clients, ttft, tpot, x, np.full(clients.shape, fits))


def _line_after(ends: np.ndarray, r: float, lead: int, late: int) -> tuple[np.ndarray, np.ndarray]:
    """``_clustered_line``'s line after a turn whose requests ended at steps ``ends``: (the
    steps each ended after the first, the line step each one's next prompt is done in), a
    prompt taking ``r`` steps, ``lead`` decode-only steps from the first end to the line's
    start and ``late`` steps for a prompt sent while a line step runs."""
    k = np.arange(1, ends.size + 1, dtype=np.float64)
    apart = ends - ends[0]
    # The line's first step holds the prompts of the requests that ended with the first; those
    # that ended before the line started join from its second step; the later ones end with
    # line step ``apart - lead``.
    ready = np.where(apart == 0, 0.0, np.where(apart <= lead, 1.0, apart - lead + late))
    # First come first served at r steps a prompt: done at k r + the largest idle gap.
    return apart, np.ceil(k * r + np.maximum.accumulate(ready - (k - 1) * r) - 1e-9)


def _clustered_line(
    table: StepTable,
    clients: np.ndarray,
    slots: np.ndarray,
    decode: float,
    overhead: np.ndarray,
    steady: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(TTFT, TPOT, requests/s) of closed-loop clients with requests of the same lengths on a
    decode-first engine (vLLM, TensorRT-LLM) whose request path holds a resubmitted prompt
    back from the scheduler (front end, tokenization, the last token's delivery: ``gap``
    seconds; a scheduler a step ahead takes it a step later still): the n requests of a turn
    decode in step, so they end as many steps apart as their prompts were done in the turn
    before; while no new prompt has reached the scheduler those steps are decode-only and
    short, so the ones ending before the first's prompt is taken in send theirs together (a
    cluster), and the prompts queue in one line, each taking r = p' / (budget - decoders)
    steps (chunks), or 1 / (the whole prompts that fit beside the decoders) steps. The line's
    first step holds the prompts of the requests that ended with the first; the rest of the
    cluster arrives while it runs. The later ones end one line step after another and send
    while the next step runs, which started without them: they wait for it, then queue. The
    turn: the line's steps, then decode-only steps until the first request's D decode steps
    are done; the ends of one turn give the next's (followed for up to ``TURNS`` turns).
    Where no cluster forms (the ends stagger) or the line outlasts the decoding, ``steady``
    stands."""
    config, request = table.server.config, table.request
    if config.prefill_first:
        return steady
    new, budget = request.new_tokens, table.budget
    before = float(config.to_scheduler_s(request.prompt_tokens))
    gap = before + config.request_path.delivery_s
    ahead = config.request_path.schedule_ahead_steps
    ranks = config.dp_ranks
    ttft0, tpot0, x0 = (np.array(v, dtype=np.float64) for v in steady)
    for i, n in enumerate(slots.astype(int)):
        if n < 2:
            continue
        t_decode = float(table.decode(np.array([float(n)]))[0])
        # Each attention-DP rank runs a line of its own requests in its share of the budget,
        # all ranks in the same steps. A step of the line: the rank's other m - 1 decoding,
        # prompt chunks in what they leave; r: the share of such a step a prompt takes.
        m = math.ceil(n / ranks)
        if m < 2:
            continue
        left = max(budget / ranks - (m - 1) * config.decode_tokens, 1.0)
        if config.chunked_prefill:
            r, line_tokens = new / left, min(left, new * m)
        else:  # whole prompts: as many as fit what the decoders leave share a step
            fit = math.floor(left / new)
            if fit < 1:
                continue  # they wait for decoders to end (``_waves``)
            r, line_tokens = 1.0 / fit, new * min(fit, m)
        k = np.arange(1, m + 1, dtype=np.float64)
        t_full = float(table.mixed(np.array([n - 1.0]), np.array([line_tokens * ranks]))[0])
        # Decode-only steps from the first request's end to the line's start: its prompt
        # reaches the scheduler ``gap`` later, at the boundary after that (and the steps
        # it plans ahead). A prompt arriving while a line step runs joins after the steps
        # that cover ``gap`` (and those planned ahead).
        lead = math.ceil(gap / t_decode - 1e-9) + ahead
        late = math.ceil(gap / t_full - 1e-9) + ahead
        # The requests end as many steps apart as their prompts were done in the previous
        # turn: from ceil(k r) (every step full), to the turn's own (``done``) in a few turns.
        ends = np.ceil(k * r - 1e-9)
        for _ in range(TURNS):
            if ends[1] - ends[0] > lead:
                break  # no cluster: the ends stagger (``_full_steps``)
            done = _line_after(ends, r, lead, late)[1]
            if np.array_equal(done, ends):
                break
            ends = done
        apart, done = _line_after(ends, r, lead, late)
        if apart[1] > lead:
            continue
        line = float(done[-1])
        if line - done[0] >= decode:
            continue  # requests end while the line runs: not this regime
        opening = float(np.count_nonzero(apart == 0))
        first_tokens = min(left, new * opening)
        if not config.chunked_prefill:
            first_tokens = new * min(fit, opening)
        t_first = float(table.mixed(np.array([n - 1.0]), np.array([first_tokens * ranks]))[0])
        cycle = overhead[i] + t_first + (line - 1) * t_full + (decode - line + done[0]) * t_decode
        x = n / cycle
        # TTFT: the cluster's prompts reach the scheduler as many decode steps after the
        # first's as their requests ended after it; a later one's runs from its request's end.
        clustered = overhead[i] + t_first + (done - 1) * t_full - apart * t_decode
        first = np.where(apart <= lead, clustered, (done - (apart - lead)) * t_full)
        within = lead - 1
        # A request decodes through the rest of its line and, when its prompt came late in
        # it, into the next turn's line (which starts once the cluster's successors are in).
        long = line - done + np.maximum(done - done[0] - within - 1, 0.0)
        after = long * t_full + (decode - long) * t_decode
        # Clients beyond the n running wait for a slot: (C - n) / X more.
        ttft0[i] = float(np.median(first)) + max(clients[i] - n, 0.0) / x
        tpot0[i] = float(np.median(after)) / max(request.output_tokens - 1, 1)
        x0[i] = x
    return ttft0, tpot0, x0


def _full_steps(
    table: StepTable, slots: np.ndarray, first: np.ndarray, cap: np.ndarray
) -> np.ndarray:
    """TTFT in the server when requests of the same lengths reach the scheduler one after
    another (their ends staggered by the first burst): every step then holds what the budget
    leaves beside the decoders, so a prompt of p' tokens takes ceil(p' / left) full steps
    (at chunk boundaries the next prompt fills the rest), not p' / left steps of its own
    tokens."""
    config = table.server.config
    if config.prefill_first:
        return first
    d = np.maximum(cap - 1, 0.0)
    left = np.maximum(table.budget - d * config.decode_tokens, 1.0)
    new = table.request.new_tokens
    steps = np.ceil(new / left) if config.chunked_prefill else 1.0 + 0 * left
    full = table.mixed(d, np.maximum(np.minimum(left, new * slots), new / steps))
    return np.maximum(first, steps * full)


def _lockstep(
    table: StepTable,
    clients: np.ndarray,
    slots: np.ndarray,
    decode: float,
    overhead: float | np.ndarray,
    steady: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(TTFT, TPOT, requests/s) of closed-loop clients with requests of the same lengths that
    stay in step: all n = slots requests reach the server together (at t = 0, and again each
    time they end together), their prompts run as one burst of ceil(n p' / budget) steps, then
    the n decode together. They end together, and so stay in step, when the engine runs
    waiting prompts before decoding (SGLang), when TensorRT-LLM's attention-DP balance holds
    prompts until every rank has one, or when the whole burst fits one step; elsewhere (the
    ends staggered by the burst) ``steady`` stands. The median request's prompt is done with
    the step that reads the median prompt's last token; TPOT counts the rest of the burst, as
    the simulator's (end - first token) / (output - 1) does."""
    config, request = table.server.config, table.request
    new, budget = request.new_tokens, table.budget
    total = slots * new
    steps = np.maximum(np.ceil(total / budget - 1e-9), 1.0)
    balanced = config.balance_timeout_steps > 0 and config.dp_ranks > 1
    together = config.prefill_first or balanced or steps <= 1
    if not np.any(together):
        return steady
    t_full = table.prompts(np.minimum(total, budget))
    t_last = table.prompts(np.maximum(total - (steps - 1) * budget, 1.0))
    burst = (steps - 1) * t_full + t_last

    def done(k: np.ndarray) -> np.ndarray:
        """When the k-th prompt of the burst has its first token."""
        step = np.maximum(np.ceil(k * new / budget - 1e-9), 1.0)
        return np.where(step >= steps, burst, step * t_full)

    # The median of n (the mean of the two middle ones when n is even).
    first = (done(np.floor((slots + 1) / 2)) + done(np.ceil((slots + 1) / 2))) / 2
    t_decode = table.decode(slots)
    cycle = overhead + burst + decode * t_decode
    x = slots / cycle
    after_first = burst - first + decode * t_decode
    ttft = np.maximum(clients / x - after_first, overhead + first)
    tpot = after_first / max(request.output_tokens - 1, 1)
    ttft0, tpot0, x0 = steady
    return (np.where(together, ttft, ttft0), np.where(together, tpot, tpot0),
            np.where(together, x, x0))  # fmt: skip


def _waves(
    table: StepTable, slots: np.ndarray, x: np.ndarray, in_server: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Throughput and decode time when long prompts cannot join the running decoders: an
    engine without chunked prefill admits a prompt only into what the decode tokens leave of
    the budget, FCFS, so a prompt longer than budget - decoders stops admission until enough
    decoders have ended. With such prompts among the n requests of a turn-over (expected count
    n x share longer than budget - n), the server drains and refills in waves, one prompt
    step per request (each request alone when the mean prompt fills the budget), then decodes
    them together; a request decodes through about half its wave's refill. The two regimes are
    mixed by that expected count (capped at 1)."""
    request, budget = table.request, table.budget
    new, longest = request.new_tokens, request.longest_new
    spread = 2.0 * (longest - new)
    if spread > 0:
        share = np.clip((longest - (budget - slots)) / spread, 0.0, 1.0)
    else:
        share = (longest > budget - slots).astype(np.float64)
    weight = np.minimum(slots * share, 1.0)
    if not np.any(weight > 0):
        return x, in_server
    n = np.where(new >= budget, 1.0, slots)
    steps = decode_steps(request, table.server.config.tokens_per_step)
    t_refill = table.mixed(n / 2, new + 0 * n)
    t_decode = table.decode(n)
    overlap = np.minimum(n / 2, steps)
    wave_x = n / (n * t_refill + steps * t_decode)
    wave_decode = overlap * t_refill + (steps - overlap) * t_decode
    return (1 - weight) * x + weight * wave_x, (1 - weight) * in_server + weight * wave_decode


def _prefill_wait(
    cv2: float,
    busy: np.ndarray,
    x: np.ndarray,
    instances: int,
    prompts: np.ndarray,
    t_prompts: np.ndarray,
    decoding: np.ndarray,
) -> np.ndarray:
    """The median request's wait at a prefill instance, in steps of ``prompts`` prompts, for
    closed-loop clients whose lengths vary with squared coefficient of variation ``cv2``.

    Each client comes back one cycle after its last visit, the cycle varying by sigma (its
    prompt steps and its ``decoding`` time, as the lengths do), so the X arrivals a second of
    all clients form a lattice perturbed by sigma: their gaps nearly even (c^2 = 2 (sigma
    X)^2) while sigma is small beside the gap 1 / X, as random as Poisson's (c^2 = 1) where it
    is larger; round robin gives each instance every ``instances``-th (c_a^2 that over
    ``instances``). Kingman's G/G/1 gives the mean wait, (c_a^2 + c_s^2) / 2 x busy /
    (1 - busy) steps (the service varies as the prompts do: c_s^2 = cv2). But a perturbed
    lattice's count over any window departs from its mean by at most about what crosses the
    window's ends (variance 2 sigma X / sqrt(pi) for Gaussian perturbations), so no backlog
    grows beyond that many prompts, over ``instances`` per instance, however busy the
    instance. A prompt waits with probability busy, then about exponentially long; the
    median is taken from that."""
    sigma_x = np.sqrt(cv2 * (t_prompts * t_prompts + decoding * decoding)) * x
    arrivals = -np.expm1(-2.0 * sigma_x * sigma_x) / instances
    kingman = (arrivals + cv2) * (0.5 / (1 - busy))  # x busy, divided out for the median
    crossing = np.sqrt(sigma_x * (2.0 / math.sqrt(math.pi))) / (instances * prompts * busy)
    return np.minimum(kingman, crossing) * np.log(np.maximum(2 * busy, 1.0))


def disaggregated_steady_state(
    deployment: Deployment,
    prefill: Server,
    decode: Server,
    request: MeanRequest,
    concurrency: ArrayLike,
    tables: tuple[StepTable, StepTable] | None = None,
) -> SteadyState:
    """The steady state of ``concurrency`` closed-loop clients on a disaggregated deployment
    (see the module docstring; ``tables``: the prefill and decode servers' step times)."""
    split = deployment.disaggregation
    if split is None:
        raise InputError("disaggregated_steady_state needs a disaggregated deployment")
    clients = _clients(concurrency)
    per_decoder = np.ceil(clients / split.decode_workers)
    if tables is None:
        tables = step_table(prefill, request, 1), step_table(decode, request, per_decoder)
    prompt_table, decode_table = tables
    _, prefill_fits = _slots(prefill, MeanRequest(request.prompt_tokens, 1.0), clients)
    slots, decode_fits = _slots(decode, request, per_decoder)
    steps = decode_steps(request, decode.config.tokens_per_step)
    new, budget = request.new_tokens, float(prefill.config.token_budget)
    transfer = float(kv_transfer_seconds(deployment, request.prompt_tokens))
    # The prefill instance receives the request (front end, tokenization, any fitted
    # overhead); the decode instance streams the tokens.
    overhead = (
        float(prefill.config.to_scheduler_s(request.prompt_tokens))
        + decode.config.request_path.delivery_s
    )

    def prompt_steps(prompts: np.ndarray) -> np.ndarray:
        """Seconds to read ``prompts`` prompts together, in steps of the budget."""
        count = np.ceil(prompts * new / budget)
        return count * prompt_table.prompts(prompts * new / count)

    full = np.maximum(np.floor(budget / new), 1.0) + 0 * clients
    prefill_capacity = split.prefill_workers * full / prompt_steps(full)
    t_prompts = prompt_steps(0 * clients + 1)
    mean = decode_table.decode(slots)
    x = np.minimum(clients / (overhead + t_prompts + transfer + steps * mean), prefill_capacity)
    ttft = t_prompts + transfer
    for _ in range(ITERATIONS):
        arriving = x / split.prefill_workers
        # Prompts that arrive while a prompt step runs are read together in the next one.
        prompts = np.clip(arriving * t_prompts, 1.0, full)
        if request.same_lengths:
            # Clients in step: the first burst's groups (a step's worth of prompts) arrive
            # together on every later turn too, where every decode instance holds as many
            # requests (the same steps); otherwise they end apart and arrive one by one.
            even = clients % split.decode_workers == 0
            prompts = np.where(even, np.minimum(full, np.ceil(clients / split.prefill_workers)),
                               prompts)  # fmt: skip
        t_prompts = prompt_steps(prompts)
        busy = np.minimum(arriving * t_prompts / prompts, 0.95)
        if request.length_cv2 is None:
            wait = busy**2 / (2 * (1 - busy))
        else:
            wait = _prefill_wait(request.length_cv2, busy, x, split.prefill_workers,
                                 prompts, t_prompts, steps * mean)  # fmt: skip
        ttft = t_prompts * (1 + wait) + transfer
        d = np.clip(x / split.decode_workers * steps * mean, 1.0, slots)
        mean = mean + DAMPING * (decode_table.decode(d) - mean)
        decode_capacity = split.decode_workers * slots / np.maximum(steps * mean, 1e-12)
        capacity = np.minimum(decode_capacity, prefill_capacity)
        following = np.minimum(clients / (overhead + ttft + steps * mean), capacity)
        moved = np.abs(following - x) / x
        x = x + DAMPING * (following - x)
        if np.all(moved < TOLERANCE):
            break
    in_server = steps * mean
    decode_capacity = split.decode_workers * slots / np.maximum(in_server, 1e-12)
    x = np.minimum(
        clients / (overhead + ttft + in_server), np.minimum(decode_capacity, prefill_capacity)
    )
    # Clients beyond the capacity wait in front of the pool that bounds it: for a prompt
    # instance before the first token; for a decode slot after it (the first token comes with
    # the prompt's last step and the transfer, the next when a decode instance takes the
    # request in), so that wait is part of the TPOT. The request overhead is part of the TTFT.
    wait = np.maximum(clients / x - in_server - overhead - ttft, 0.0)
    at_decode = decode_capacity <= prefill_capacity
    ttft = ttft + np.where(at_decode, 0.0, wait) + overhead
    tpot = (in_server + np.where(at_decode, wait, 0.0)) / max(request.output_tokens - 1, 1)
    fits = np.full(clients.shape, prefill_fits and decode_fits)
    return SteadyState(clients, ttft, tpot, x, fits)
