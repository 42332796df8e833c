"""limit/offset paging for list endpoints. Without `limit` a list answers in full, as it
always has, so existing clients keep working; with it, `Link: <...>; rel="next"` points at
the next page while there is one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, TypeVar

from fastapi import Depends, Query, Request, Response

T = TypeVar("T")


@dataclass(frozen=True)
class Page:
    limit: int | None
    offset: int

    def cut(self, items: Sequence[T], request: Request, response: Response) -> list[T]:
        page, headers = self.split(items, request)
        response.headers.update(headers)
        return page

    def split(self, items: Sequence[T], request: Request) -> tuple[list[T], dict[str, str]]:
        """The page and the headers that describe it (for an answer built as bytes)."""
        if self.limit is None:
            return list(items[self.offset :]), {}
        page = list(items[self.offset : self.offset + self.limit])
        headers = {"X-Total-Count": str(len(items))}
        if self.offset + self.limit < len(items):
            url = request.url.include_query_params(limit=self.limit, offset=self.offset + self.limit)
            headers["Link"] = f'<{url.path}?{url.query}>; rel="next"'
        return page, headers


async def _page(
    limit: Annotated[int | None, Query(ge=1, le=1000, description="Page size; absent: everything.")] = None,
    offset: Annotated[int, Query(ge=0, le=1_000_000_000, description="Items to skip.")] = 0,
) -> Page:
    return Page(limit, offset)


PageDep = Annotated[Page, Depends(_page)]
