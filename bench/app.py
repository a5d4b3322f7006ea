"""The app the bench serves: the real one (``api.app_from_env``) plus one bench-only route,
``GET /_bench/pk/{partition}/{offset}``: one primary-key select on the same views through the
same pool, the "bare route" replay verify is measured against.

Served by the real server path, ``evidence api --factory bench.app:bench_app``, so the bench
measures the workers, bounds and settings production runs with.
"""

from __future__ import annotations

from fastapi import FastAPI

from api import create_app
from api.config import Settings


def bench_app() -> FastAPI:
    app = create_app(Settings.from_env())
    db = app.state.db

    @app.get("/_bench/pk/{partition}/{offset}")
    async def bare(partition: int, offset: int) -> dict[str, int | None]:
        sql = (f'select log_offset from "{db.views}".records '
               'where log_partition = %s and log_offset = %s')
        # through the pool the real routes use (api.pool.Pool.one: a database error is the
        # 503 theirs is, never a 500)
        row = await db._pool.one("bench_pk", sql, (partition, offset))
        return {"offset": row[0] if row else None}

    return app
