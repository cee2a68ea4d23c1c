"""Concurrent writes: 50 bulk uploads at once, some of them retries of others with the same
Idempotency-Key racing the original; every row must be stored exactly once (both backends)."""

from __future__ import annotations

import asyncio
import uuid

import httpx

from tests.api.conftest import Service

DISTINCT_UPLOADS = 35
RETRIED = 15  # the first RETRIED uploads are sent twice, concurrently, under the same key
ROWS_PER_UPLOAD = 40


def _upload(model: str) -> dict[str, object]:
    return {
        "metadata": {"test": "concurrency"},
        "measurements": [
            {
                "model": model,
                "num_prompt_tokens": 1 + i,
                "num_output_tokens": 1 + i % 7,
                "runtime_s": 0.01 * (1 + i),
            }
            for i in range(ROWS_PER_UPLOAD)
        ],
    }


async def _send_all(
    service: Service, requests: list[tuple[str, dict[str, object]]]
) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=len(requests))
    async with httpx.AsyncClient(base_url=service.base_url, timeout=120, limits=limits) as client:
        return await asyncio.gather(
            *(
                client.post(
                    "/v1/measurement-sets",
                    json=body,
                    headers={**service.auth, "Idempotency-Key": key},
                )
                for key, body in requests
            )
        )


def test_concurrent_uploads_store_every_row_once(service: Service) -> None:
    run = uuid.uuid4().hex[:8]
    uploads = [(f"{run}-key-{i}", _upload(f"{run}-model-{i}")) for i in range(DISTINCT_UPLOADS)]
    requests = uploads + uploads[:RETRIED]
    assert len(requests) == 50
    responses = asyncio.run(_send_all(service, requests))
    assert all(r.status_code == 201 for r in responses), [
        r.text for r in responses if r.status_code != 201
    ]
    by_key: dict[str, set[int]] = {}
    for (key, _), response in zip(requests, responses, strict=True):
        by_key.setdefault(key, set()).add(response.json()["id"])
    assert all(len(ids) == 1 for ids in by_key.values())  # a retry got the original's set
    replayed = sum(r.headers.get("idempotent-replayed") == "true" for r in responses)
    assert replayed == RETRIED

    with service.client() as client:
        for i in range(DISTINCT_UPLOADS):
            model = f"{run}-model-{i}"
            sets = client.get("/v1/measurement-sets", params={"model": model}).json()
            assert sets["total"] == 1, model
            rows = client.get(
                f"/v1/measurement-sets/{sets['items'][0]['id']}/measurements", params={"limit": 1}
            ).json()
            assert rows["total"] == ROWS_PER_UPLOAD


def test_concurrent_uploads_with_one_name_conflict_cleanly(service: Service) -> None:
    name = f"shared-{uuid.uuid4().hex[:8]}"
    requests = [(f"{name}-{i}", {**_upload(f"{name}-m{i}"), "name": name}) for i in range(10)]
    responses = asyncio.run(_send_all(service, requests))
    codes = sorted(r.status_code for r in responses)
    assert codes == [201] + [409] * 9, [r.text for r in responses]
    with service.client() as client:
        winners = [
            client.get("/v1/measurement-sets", params={"model": f"{name}-m{i}"}).json()["total"]
            for i in range(10)
        ]
    assert sorted(winners) == [0] * 9 + [1]  # the losers wrote no rows
