"""The pages' last route: any other path under ``/ui/`` is the 404 page (not the JSON
API's error), with the pages' security headers. Included after every pages router."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from .web import PREFIX, PageError, PageRoute

__all__ = ["router"]

router = APIRouter(prefix=PREFIX, route_class=PageRoute, include_in_schema=False)


@router.api_route("/{rest:path}", methods=["GET", "POST", "HEAD"])
async def nothing_here(request: Request, rest: str) -> Response:
    raise PageError(404, "not found")
