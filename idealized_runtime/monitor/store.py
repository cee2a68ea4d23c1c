"""Where finished rounds go: the service over HTTP (``POST /v1/monitor/rounds`` with an API key)
or a database directly (the service's own ``api.monitor_crud``, in one transaction per round).
Either way a round is stored whole or not at all, and storing it again stores nothing (its id
is its identity), so the monitor retries a round whose answer it did not get.

``store`` raises ``StoreUnavailable`` when the store cannot be reached or is busy (the round
waits in the state folder and is sent again later) and ``StoreRefused`` when it answered no
for this round (another round under its id, a round it finds invalid): retrying cannot help.
"""

from __future__ import annotations

from typing import Protocol

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.rounds import MonitorRound

STORE_TIMEOUT_S = 30.0
ROUNDS_PATH = "/v1/monitor/rounds"


class StoreUnavailable(Exception):
    """The store could not take the round now; it is sent again later."""


class StoreRefused(Exception):
    """The store refused the round for good (the message says why)."""


class RoundStore(Protocol):
    def store(self, monitor_round: MonitorRound) -> None: ...

    def close(self) -> None: ...

    @property
    def name(self) -> str: ...


class ServiceStore:
    """The REST service: one POST per round, keyed by the round's id."""

    def __init__(self, url: str, api_key: str) -> None:
        import httpx

        from idealized_runtime import __version__

        self.url = url.rstrip("/")
        self._client = httpx.Client(
            base_url=self.url,
            timeout=STORE_TIMEOUT_S,
            headers={
                "Authorization": f"Bearer {api_key}",
                "User-Agent": f"idealized-runtime/{__version__}",
            },
        )

    @property
    def name(self) -> str:
        return self.url

    def check_key(self) -> bool:
        """False if the service refuses the key (401); True if it accepts it or cannot be
        reached now (rounds then wait until it can). A POST without a body: the service checks
        the key before it reads one, so a valid key gets a 422 and writes nothing."""
        import httpx

        try:
            response = self._client.post(ROUNDS_PATH, content=b"{}")
        except httpx.HTTPError:
            return True
        return response.status_code != 401

    def store(self, monitor_round: MonitorRound) -> None:
        import httpx

        try:
            response = self._client.post(
                ROUNDS_PATH,
                content=monitor_round.model_dump_json(),
                headers={"Content-Type": "application/json"},
            )
        except httpx.HTTPError as error:
            raise StoreUnavailable(f"{type(error).__name__}: {error}") from None
        if response.status_code in (200, 201):
            return
        detail = _detail(response)
        if response.status_code in (408, 429) or response.status_code >= 500:
            raise StoreUnavailable(f"HTTP {response.status_code}: {detail}")
        raise StoreRefused(f"HTTP {response.status_code}: {detail}")

    def close(self) -> None:
        self._client.close()


def _detail(response: object) -> str:
    try:
        detail = response.json().get("detail")  # type: ignore[attr-defined]
    except (ValueError, AttributeError):
        detail = None
    text = str(detail if detail is not None else getattr(response, "text", ""))
    return " ".join(text.split())[:300]


class DatabaseStore:
    """A database URL (SQLite or PostgreSQL), migrated to the service's schema first."""

    def __init__(self, url: str) -> None:
        from idealized_runtime.api.report_database import redact

        self.url = url
        self._name = redact(url)

    @property
    def name(self) -> str:
        return self._name

    def store(self, monitor_round: MonitorRound) -> None:
        from sqlalchemy.exc import OperationalError

        from idealized_runtime.api.monitor_crud import RoundConflict, store_round
        from idealized_runtime.api.report_database import write_session

        try:
            with write_session(self.url) as session:
                store_round(session, monitor_round)
        except RoundConflict as error:
            raise StoreRefused(str(error)) from None
        except (OperationalError, InputError) as error:
            raise StoreUnavailable(" ".join(str(error).split())[:300]) from None

    def close(self) -> None:
        pass
