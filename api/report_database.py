"""The service database as the report sees it: store bench results and the HELM reference data
(through the service's ``api.crud`` functions), and read leaderboard inputs back (through the
service's ``api.leaderboard_inputs``, plus the profiles for the runtime-vs-output charts).

Every store is idempotent: measurement sets are found by name, imported fits by (model, method,
source), capability scores are upserted; storing twice adds nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import inspect, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from idealized_runtime.api.db import redact, unreachable
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.scenarios import ScenarioResult
from idealized_runtime.core.types import (
    Architecture,
    FittedCostModel,
    Hardware,
    LoadSummary,
    Measurement,
    Provenance,
)
from idealized_runtime.leaderboard.rows import LeaderboardInputs, ProfileInput
from idealized_runtime.report.load import LoadCurve, curves_from
from idealized_runtime.trends.series import ProviderSeries

if TYPE_CHECKING:
    from idealized_runtime.api.seed import SeedReport

PAGE = 1_000_000


def _database(url: str):
    from idealized_runtime.api.db import Database
    from idealized_runtime.api.settings import Settings, normalize_database_url

    return Database(Settings(database_url=normalize_database_url(url)))


@contextlib.contextmanager
def write_session(url: str) -> Iterator[Session]:
    """A write session on ``url``, migrated to the current schema first; commits on success."""
    from idealized_runtime.api.migrate import upgrade

    database = _database(url)
    try:
        try:
            upgrade(database.engine)
        except OperationalError as error:
            raise unreachable(url, error) from None
        with database.write_sessions() as session:
            yield session
            session.commit()
    finally:
        database.dispose()


@contextlib.contextmanager
def read_session(url: str) -> Iterator[Session]:
    """A read session on an existing database; an absent or empty one is an InputError."""
    parsed = make_url(url)
    on_disk = parsed.get_backend_name() == "sqlite" and parsed.database not in ("", ":memory:")
    if on_disk and parsed.database and not Path(parsed.database).expanduser().is_file():
        raise InputError(f"no such database file: {parsed.database}")
    database = _database(url)
    try:
        try:
            tables = inspect(database.engine).get_table_names()
        except OperationalError as error:
            raise unreachable(url, error) from None
        if "fits" not in tables:
            raise InputError(f"database {redact(url)} is empty (no service tables)")
        with database.read_sessions() as session:
            yield session
    finally:
        database.dispose()


# --- storing -----------------------------------------------------------------------------------


def store_catalog(
    session: Session, architectures: list[Architecture], hardware: list[Hardware]
) -> SeedReport:
    """The architectures and hardware not stored yet, added (``api.seed.store_catalog``)."""
    from idealized_runtime.api import seed

    return seed.store_catalog(session, architectures, hardware)


def store_measurement_set(
    session: Session,
    *,
    name: str,
    source: str,
    measurements: list[Measurement],
    fits: list[FittedCostModel],
    stack: Provenance | None = None,
    metadata: dict | None = None,
) -> bool:
    """One measurement set and the fits made from it; False if a set of that name exists."""
    from idealized_runtime.api import crud
    from idealized_runtime.api.models import MeasurementSetRow

    exists = session.execute(
        select(MeasurementSetRow.id).where(MeasurementSetRow.name == name)
    ).scalar_one_or_none()
    if exists is not None:
        return False
    row = crud.create_measurement_set(
        session,
        name=name,
        source=source,
        metadata=metadata or {},
        stack=stack,
        measurements=measurements,
        created_by=None,
    )
    for fit in fits:
        crud.add_fit(session, fit, source="fitted", measurement_set_id=row.id)
    return True


def store_imported_fits(session: Session, fits: list[FittedCostModel]) -> int:
    """Fits that come from a table rather than our timings (HELM's); skips ones stored."""
    from idealized_runtime.api import crud
    from idealized_runtime.api.models import FitRow

    stored = 0
    for fit in fits:
        exists = session.execute(
            select(FitRow.id).where(
                FitRow.model == fit.model, FitRow.method == fit.method, FitRow.source == "import"
            )
        ).first()
        if exists is None:
            crud.add_fit(session, fit, source="import", measurement_set_id=None)
            stored += 1
    return stored


def store_scenario_results(session: Session, results: tuple[ScenarioResult, ...]) -> int:
    """HELM's per-scenario accuracies, runtimes and token counts as capability scores
    (``api.seed.store_scenario_results``)."""
    from idealized_runtime.api import seed

    return seed.store_scenario_results(session, results)


# --- reading -----------------------------------------------------------------------------------


def _profiles(session: Session) -> list[ProfileInput]:
    """One profile per (measurement set, model) that has fits: the charts' points and lines."""
    from idealized_runtime.api import crud

    sets, _ = crud.list_measurement_sets(session, source=None, model=None, limit=PAGE, offset=0)
    profiles = []
    for measurement_set in sets:
        fit_rows, _ = crud.list_fits(
            session,
            model=None,
            method=None,
            measurement_set_id=measurement_set.id,
            limit=PAGE,
            offset=0,
        )
        newest: dict[tuple[str, str], FittedCostModel] = {}
        for fit_row in fit_rows:  # ascending id: the newest fit of a method wins
            newest[(fit_row.model, fit_row.method)] = crud.fit_model(fit_row)
        measurements = crud.set_measurements(session, measurement_set.id)
        for model in sorted({model for model, _ in newest}):
            profiles.append(
                ProfileInput(
                    name=model if len(sets) == 1 else f"{model} ({measurement_set.source})",
                    fits=tuple(fit for (m, _), fit in newest.items() if m == model),
                    measurements=tuple(m for m in measurements if m.model == model),
                )
            )
    return profiles


def database_report_inputs(url: str) -> LeaderboardInputs:
    """Leaderboard inputs stored in the service database at ``url``."""
    from idealized_runtime.api.leaderboard_inputs import database_inputs

    with read_session(url) as session:
        inputs = database_inputs(session)
        profiles = _profiles(session)
    if not inputs.models and not inputs.scenario_results:
        raise InputError(f"database {redact(url)} holds no fits or scores: nothing to report")
    return replace(inputs, profiles=tuple(profiles), source=f"database {redact(url)}")


def database_curves(url: str) -> list[LoadCurve]:
    """Curves from the service database's load summaries (none on a database without them)."""
    from idealized_runtime.api import crud

    with read_session(url) as session:
        if "load_summaries" not in inspect(session.get_bind()).get_table_names():
            return []
        stored = crud.all_load_summaries(session)
    summaries = [
        LoadSummary.model_validate(s.model_dump(include=set(LoadSummary.model_fields)))
        for s in stored
    ]
    return curves_from(summaries, [s.source for s in stored])


def database_trends(url: str) -> list[ProviderSeries]:
    """The monitoring series in the service database (none on a database without rounds)."""
    from idealized_runtime.api.monitor_crud import round_points
    from idealized_runtime.trends.series import build_series

    with read_session(url) as session:
        if "monitor_rounds" not in inspect(session.get_bind()).get_table_names():
            return []
        points = round_points(session)
    return build_series(points)
