"""The public read API of the deployment log and of each stream's tree: C2SP tlog-tiles.

    GET /log/checkpoint                        the latest deployment checkpoint, cosigned
    GET /log/tile/<L>/<N>[.p/<W>]              hash tiles of the deployment tree
    GET /log/tile/entries/<N>[.p/<W>]          entry bundles: the stream checkpoints
    GET /log/streams/{stream}/checkpoint       the stream's latest checkpoint, cosigned
    GET /log/streams/{stream}/tile/<L>/<N>[.p/<W>]   hash tiles of the stream's tree

No API key (docs/witnessing.md): what is served is hashes and signed checkpoints, never a
record's content, so any tlog-tiles client (a witness, a monitor, ``evidence audit``) reads
the deployment log at the prefix ``<API>/log`` and a stream's tree at
``<API>/log/streams/<stream>``. A stream's entries are its records: those stay behind a key.

What is served is what is signed: a tile is served only within the latest checkpoint's
size (for the deployment log, the latest whose root the projected tree has not
contradicted). A full tile once that size covers all of it; a partial tile ``.p/<W>`` once
the tile holds at least ``W`` hashes at that size, so a client holding any checkpoint up to
the latest gets the partial tiles of its own size (tlog-tiles asks a log to serve the
partial tiles of every size it signed). A tile beyond the signed tree is a 404; a path that
is not a tile path a 400 with the reason (:func:`evidence_contract.tiles.parse_tile_path`).
A tile that the projection has signed but not yet stored is a 503 with Retry-After.

Full tiles and bundles never change: they are served immutable. Partial tiles are cached a
few seconds, checkpoints not at all.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response

from evidence_contract.tiles import (
    ENTRIES, TILE_WIDTH, Tile, TileError, encode_entry_bundle, parse_tile_path, tile_width,
)

from ..deps import Db, StreamId
from ..errors import InvalidRequest, NotFound, Unavailable
from ..models import ErrorBody
from .tlog import MAX_COSIGNATURES

__all__ = ["CACHE_CHECKPOINT", "CACHE_FULL_TILE", "CACHE_PARTIAL_TILE", "MalformedTilePath",
           "get_log_checkpoint", "get_log_tile", "get_stream_checkpoint", "get_stream_tile",
           "router"]

router = APIRouter(tags=["public log"])

CACHE_FULL_TILE = "public, max-age=31536000, immutable"
CACHE_PARTIAL_TILE = "public, max-age=5"
CACHE_CHECKPOINT = "no-store"

_TEXT = "text/plain; charset=utf-8"
_OCTETS = "application/octet-stream"


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {status: {"model": ErrorBody} for status in statuses}


_TILE = {200: {"content": {_OCTETS: {"schema": {"type": "string", "format": "binary"}}},
               "description": "the tile: 32-byte hashes (or, for entries, uint16-length-"
                              "prefixed entries), full or `.p/<W>` wide"},
         **_errors(400, 404, 422, 503)}
_NOTE = {200: {"content": {"text/plain": {"schema": {"type": "string"}}},
               "description": "the signed note, byte-exact, then the witnesses' "
                              "cosignature lines"}}


class MalformedTilePath(InvalidRequest):
    """A path below ``/tile/`` that is not a tlog-tiles tile path: 400, as a request for a
    resource that cannot exist, with the reason."""

    status = 400


def _parse(path: str) -> Tile:
    try:
        return parse_tile_path("tile/" + path)
    except TileError as e:
        raise MalformedTilePath(f"not a tlog-tiles path: {e}") from None


def _note(cp: tuple[int, bytes, bytes], lines: list[str]) -> Response:
    return Response(cp[2] + "".join(lines).encode("utf-8"), media_type=_TEXT,
                    headers={"Cache-Control": CACHE_CHECKPOINT})


Rows = Callable[[int, int, int], Awaitable[list[tuple[int, bytes]]]]


async def _tile(tile: Tile, size: int | None, what: str, rows: Rows) -> Response:
    """The tile's bytes from ``rows(tree_level, start, count)`` when the signed ``size``
    covers it; 404 beyond, 503 while the projection has not stored all of it."""
    if size is None:
        raise NotFound(f"{what} has no signed checkpoint yet")
    has = tile_width(tile.level, tile.index, size)
    if has < tile.width:
        raise NotFound(f"{tile.path} is beyond {what}'s signed tree of {size} leaves"
                       + (f" (that tile holds {has} at that size: ask for "
                          f".p/{has})" if 0 < has < TILE_WIDTH and tile.full else ""))
    found = await rows(tile.tree_level, tile.positions.start, tile.width)
    if [i for i, _ in found] != list(tile.positions):
        raise Unavailable(f"the projection has not stored all of {tile.path} of {what} yet; "
                          f"it is catching up", retry_after=2)
    values = [v for _, v in found]
    body = encode_entry_bundle(values) if tile.level == ENTRIES else b"".join(values)
    return Response(body, media_type=_OCTETS, headers={
        "Cache-Control": CACHE_FULL_TILE if tile.full else CACHE_PARTIAL_TILE})


@router.get("/log/checkpoint", response_class=Response,
            responses={**_NOTE, **_errors(404, 503)},
            summary="The deployment log's latest checkpoint with its cosignatures")
async def get_log_checkpoint(db: Db) -> Response:
    """The latest deployment checkpoint (origin = the log's name, the size and root of the
    tree of stream checkpoints), signed by the log key (`GET /log/key`), then every witness
    cosignature held for it. No API key: this is what witnesses and monitors follow."""
    cp, lines = await db.log_checkpoint(MAX_COSIGNATURES)
    if cp is None:
        raise NotFound("the deployment log has no checkpoint yet (the publisher signs one "
                       "once a stream checkpoint is in the tree)")
    return _note(cp, lines)


@router.get("/log/tile/{path:path}", response_class=Response, responses=_TILE,
            summary="A tlog-tiles hash tile or entry bundle of the deployment log")
async def get_log_tile(path: str, db: Db) -> Response:
    """`tile/<L>/<N>[.p/<W>]`: hashes of the deployment tree; `tile/entries/<N>[.p/<W>]`:
    its entries, the stream checkpoints, each a big-endian uint16 length and the note.
    Within the latest checkpoint's size only (404 beyond); no API key."""
    tile = _parse(path)
    size = await db.log_size()

    async def read(level: int, start: int, count: int) -> list[tuple[int, bytes]]:
        if tile.level == ENTRIES:
            return await db.log_entries(start, count)
        return await db.log_hashes(level, start, count)

    return await _tile(tile, size, "the deployment log", read)


@router.get("/log/streams/{stream}/checkpoint", response_class=Response,
            responses={**_NOTE, **_errors(404, 422, 503)},
            summary="A stream's latest checkpoint with its cosignatures (no API key)")
async def get_stream_checkpoint(stream: StreamId, db: Db) -> Response:
    """The stream's latest checkpoint, as `GET /streams/{stream}/checkpoint` serves it, for a
    tlog-tiles client of the stream's tree at `/log/streams/{stream}`. A stream's
    checkpoints are entries of the public deployment log already."""
    cp, lines = await db.checkpoint(stream, None, MAX_COSIGNATURES)
    if cp is None:
        raise NotFound(f"stream {stream} has no checkpoint (none is signed before a stream's "
                       f"first record)")
    return _note(cp, lines)


@router.get("/log/streams/{stream}/tile/{path:path}", response_class=Response,
            responses=_TILE, summary="A tlog-tiles hash tile of a stream's tree (no API key)")
async def get_stream_tile(stream: StreamId, path: str, db: Db) -> Response:
    """`tile/<L>/<N>[.p/<W>]`: hashes of the stream's Merkle tree (leaf `seq - 1` = the
    record's leaf hash), within its latest checkpoint's size. No entry bundles: a stream's
    entries are its records, served with an API key (`/streams/{stream}/records`)."""
    tile = _parse(path)
    if tile.level == ENTRIES:
        raise NotFound(f"a stream's entries are its records: no entry bundles here; read "
                       f"them with an API key at /streams/{stream}/records")
    cp, _ = await db.checkpoint(stream, None, 0)

    async def read(level: int, start: int, count: int) -> list[tuple[int, bytes]]:
        return await db.stream_hashes(stream, level, start, count)

    return await _tile(tile, None if cp is None else cp[0], f"stream {stream}", read)
