"""The dependencies every endpoint declares, as parameter types (FastAPI's Annotated form): who
reads or writes, its database session, a list's page. An endpoint's signature says what it
needs in one word each."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, TypeVar

from fastapi import Depends, Query
from sqlalchemy.orm import Session

from idealized_runtime.api.db import read_session, write_session
from idealized_runtime.api.idempotency import WriteContext, write_context
from idealized_runtime.api.schemas import MAX_PAGE, Page
from idealized_runtime.api.security import Principal, reader

T = TypeVar("T")


@dataclass(frozen=True)
class PageRequest:
    """A list endpoint's page: ``limit`` rows after the first ``offset``."""

    limit: int
    offset: int

    def of(self, items: Sequence[T], total: int) -> Page[T]:
        """This page of a list of ``total`` rows."""
        return Page(items=list(items), total=total, limit=self.limit, offset=self.offset)


def page_params(
    limit: int = Query(default=50, ge=1, le=MAX_PAGE, description="Rows per page"),
    offset: int = Query(default=0, ge=0, le=10_000_000, description="Rows to skip"),
) -> PageRequest:
    return PageRequest(limit, offset)


Paging = Annotated[PageRequest, Depends(page_params)]
Reader = Annotated[Principal, Depends(reader)]
ReadSession = Annotated[Session, Depends(read_session)]
WriteSession = Annotated[Session, Depends(write_session)]
Writer = Annotated[WriteContext, Depends(write_context)]
