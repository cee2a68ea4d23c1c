"""Expensive reads are bounded: with one computation allowed, a plan held inside its computation
keeps the slot, and the next plan or estimate is refused at once with 503 and Retry-After while
health and the catalog answer; plans beyond the per-request bounds are refused in one line.

The server is the real application under uvicorn on loopback, with a real HTTP client and a
seeded SQLite database, run in this process so that the test can hold a computation: the plan
function waits on an event the test sets (no timing decides anything)."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator

import httpx
import pytest
import uvicorn
from prometheus_client.parser import text_string_to_metric_families

from tests.servers import cli_command, free_port

RETRY_AFTER = "7"
SMALL_PLAN = {
    "architecture": "llama-3.1-8b",
    "hardware": ["h100-sxm"],
    "workload": {"prompt_tokens": 512, "output_tokens": 64},
    "modes": ["aggregated"],
    "max_gpus": 1,
    "concurrency": [1, 2],
    "verify": False,
}


def _clear_process_caches() -> None:
    from idealized_runtime.api.compute import compute_slots
    from idealized_runtime.api.db import get_database
    from idealized_runtime.api.settings import get_settings
    from idealized_runtime.api.state import estimate_cache

    for cached in (get_settings, get_database, compute_slots, estimate_cache):
        cached.cache_clear()


@pytest.fixture(scope="module")
def held(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, threading.Event, threading.Event]]:
    """The server's URL, an event set when a plan's computation is entered, and one that lets
    it go on."""
    home = tmp_path_factory.mktemp("bounds")
    env = {
        "IDEALIZED_RUNTIME_HOME": str(home),
        "DATABASE_URL": "",
        "IDEALIZED_RUNTIME_MAX_CONCURRENT_COMPUTATIONS": "1",
        "IDEALIZED_RUNTIME_COMPUTE_RETRY_AFTER_S": RETRY_AFTER,
        "IDEALIZED_RUNTIME_MAX_PLAN_EVALUATIONS": "100",
        "IDEALIZED_RUNTIME_MAX_SIMULATED_REQUESTS": "50",
        # In the server's threads, where the test holds it (the default is a worker process).
        "IDEALIZED_RUNTIME_COMPUTE_IN_PROCESSES": "0",
    }
    seeded = subprocess.run(
        cli_command("db", "seed"), env={**os.environ, **env}, capture_output=True, text=True
    )
    assert seeded.returncode == 0, seeded.stderr
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    _clear_process_caches()

    from idealized_runtime.api.main import create_app
    from idealized_runtime.cost_model.planning import search

    entered, release = threading.Event(), threading.Event()
    real_plan = search.plan

    def held_plan(request):  # type: ignore[no-untyped-def]
        entered.set()
        release.wait(timeout=120)
        return real_plan(request)

    search.plan = held_plan  # the route imports it at call time
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            assert thread.is_alive(), "the server did not start"
            threading.Event().wait(0.05)
        yield f"http://127.0.0.1:{port}", entered, release
    finally:
        release.set()
        server.should_exit = True
        thread.join(timeout=30)
        search.plan = real_plan
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        _clear_process_caches()


def _metric(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    raise KeyError(name)


def test_beyond_the_computations_allowed_a_read_gets_503_with_retry_after(
    held: tuple[str, threading.Event, threading.Event],
) -> None:
    url, entered, release = held
    first: list[httpx.Response] = []
    planner = threading.Thread(
        target=lambda: first.append(httpx.post(f"{url}/v1/plan", json=SMALL_PLAN, timeout=120))
    )
    planner.start()
    try:
        assert entered.wait(timeout=60), "the first plan never reached its computation"
        with httpx.Client(base_url=url, timeout=60) as client:
            for path, body in [
                ("/v1/plan", SMALL_PLAN),
                ("/v1/estimate/hardware-model",
                 {"architecture": "llama-3.1-8b", "hardware": "h100-sxm", "prompt_tokens": 100,
                  "output_tokens": 10}),
            ]:  # fmt: skip
                busy = client.post(path, json=body)
                assert busy.status_code == 503, busy.text
                assert busy.headers["retry-after"] == RETRY_AFTER
                assert "IDEALIZED_RUNTIME_MAX_CONCURRENT_COMPUTATIONS" in busy.json()["detail"]
            # Health and the other reads do not wait for the computation.
            assert client.get("/v1/health").status_code == 200
            assert client.get("/v1/models").status_code == 200
            scraped = client.get("/metrics").text
            assert _metric(scraped, "idealized_runtime_computations_in_flight") == 1
            assert _metric(scraped, "idealized_runtime_computations_limit") == 1
            refused = _metric(
                scraped, "idealized_runtime_refusals_total", reason="computations_busy"
            )
            assert refused >= 2
    finally:
        release.set()
        planner.join(timeout=120)
    assert first and first[0].status_code == 200, first[0].text if first else "no answer"
    # The slot came back: the next plan is computed.
    again = httpx.post(f"{url}/v1/plan", json=SMALL_PLAN, timeout=120)
    assert again.status_code == 200, again.text


def test_a_plan_beyond_the_work_bounds_is_refused_in_one_line(
    held: tuple[str, threading.Event, threading.Event],
) -> None:
    url, _entered, release = held
    release.set()
    with httpx.Client(base_url=url, timeout=60) as client:
        # All stacks, modes and 12 concurrency levels: thousands of evaluations, over 100.
        wide = {**SMALL_PLAN, "modes": ["aggregated", "disaggregated"], "max_gpus": 8}
        wide.pop("concurrency")
        refused = client.post("/v1/plan", json=wide)
        assert refused.status_code == 422, refused.text
        detail = refused.json()["detail"]
        assert "IDEALIZED_RUNTIME_MAX_PLAN_EVALUATIONS" in detail and "\n" not in detail
        # Verification of 64 concurrent clients simulates at least 64 requests, over 50.
        simulated = client.post(
            "/v1/plan", json={**SMALL_PLAN, "concurrency": [64], "verify": True}
        )
        assert simulated.status_code == 422, simulated.text
        assert "IDEALIZED_RUNTIME_MAX_SIMULATED_REQUESTS" in simulated.json()["detail"]
        scraped = client.get("/metrics").text
        assert _metric(scraped, "idealized_runtime_refusals_total", reason="plan_too_large") >= 2


def test_a_plan_s_verification_is_bounded_at_the_most_clients_a_point_can_have() -> None:
    """Levels count per attention-DP rank: 2,048 a rank on 8 ranks is 16,384 clients, six
    rounds of them (a start-up queue still draining after three) 98,304 requests;
    ``max_concurrency`` bounds them."""
    from idealized_runtime.api.compute import check_plan_work, simulated_requests
    from idealized_runtime.api.settings import Settings
    from idealized_runtime.core.catalog import get_architecture, get_hardware
    from idealized_runtime.core.errors import InputError
    from idealized_runtime.cost_model.planning.request import PlanRequest, PlanWorkload
    from idealized_runtime.cost_model.planning.search import most_verification_requests

    def moe(**options: object) -> PlanRequest:
        return PlanRequest(
            architecture=get_architecture("qwen3-235b-a22b"), hardware=[get_hardware("h200")],
            stacks=["sglang"], modes=["aggregated"], max_gpus=8,
            workload=PlanWorkload(prompt_tokens=1024, output_tokens=1024), **options,  # type: ignore[arg-type]
        )  # fmt: skip

    settings = Settings(max_plan_evaluations=20_000, max_simulated_requests=8_192)
    wide = moe()
    assert simulated_requests(wide, 8) == most_verification_requests(wide, 2048 * 8) == 98_304
    with pytest.raises(InputError, match="max_concurrency"):
        check_plan_work(wide, settings=settings)
    bounded = moe(max_concurrency=1024)
    assert simulated_requests(bounded, 8) == most_verification_requests(bounded, 1024)
    check_plan_work(bounded, settings=settings)  # within the server's limits


def test_the_documented_example_plan_is_within_the_default_bounds() -> None:
    """The OpenAPI document's example plan (``PlanIn``'s) passes the server's default bounds:
    every precision with the default and an fp8 KV cache on two GPU types is 71,280
    deployment-loads, counted before the memory check."""
    from idealized_runtime.api.compute import check_plan_work
    from idealized_runtime.api.schemas import PlanIn
    from idealized_runtime.api.settings import Settings
    from idealized_runtime.core.catalog import get_architecture, get_hardware
    from idealized_runtime.core.errors import InputError
    from idealized_runtime.cost_model.planning.request import PlanRequest

    (example,) = PlanIn.model_config["json_schema_extra"]["examples"]  # type: ignore[index]
    body = PlanIn.model_validate(example)
    settings = body.model_dump(exclude={"architecture", "config", "hardware"})
    question = PlanRequest(
        architecture=get_architecture(body.architecture or ""),
        hardware=[get_hardware(name) for name in body.hardware],
        **settings,
    )
    check_plan_work(question, settings=Settings())  # no refusal
    with pytest.raises(InputError, match="KV-cache formats"):
        check_plan_work(question, settings=Settings(max_plan_evaluations=50_000))


def test_a_plan_verifies_no_more_candidates_in_turn_than_the_server_allows() -> None:
    """Each candidate's simulation is bounded; so is how many the plan may try in turn (the
    library allows 100): past ``max_verify_candidates`` the plan is refused in one line, and
    unverified it may name any number."""
    from idealized_runtime.api.compute import check_plan_work
    from idealized_runtime.api.settings import Settings
    from idealized_runtime.core.catalog import get_architecture, get_hardware
    from idealized_runtime.core.errors import InputError
    from idealized_runtime.cost_model.planning.request import PlanRequest, PlanWorkload

    def small(**options: object) -> PlanRequest:
        return PlanRequest(
            architecture=get_architecture("llama-3.1-8b"), hardware=[get_hardware("h100-sxm")],
            stacks=["vllm"], modes=["aggregated"], max_gpus=1, concurrency=[1, 2],
            workload=PlanWorkload(prompt_tokens=512, output_tokens=64), **options,  # type: ignore[arg-type]
        )  # fmt: skip

    settings = Settings()
    check_plan_work(small(verify_candidates=8), settings=settings)
    with pytest.raises(InputError, match="IDEALIZED_RUNTIME_MAX_VERIFY_CANDIDATES") as refused:
        check_plan_work(small(verify_candidates=100), settings=settings)
    assert "\n" not in str(refused.value) and "verify_candidates" in str(refused.value)
    check_plan_work(small(verify_candidates=100, verify=False), settings=settings)
