"""Operations: liveness, readiness and metrics, with no API key (see :mod:`api.metrics`).

    GET /healthz    the process is alive (never touches the database)
    GET /readyz     the database answers, the projector's heartbeat (of every log
                    partition: each projector beats the ones it owns) is at most
                    STALE_HEARTBEAT_S old, and the projection lag (against the log ends
                    that heartbeat saw in Kafka) is within EVIDENCE_API_MAX_LAG
    GET /metrics    Prometheus text; probes the database for the lag and up gauges
"""

from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from projections.config import STALE_HEARTBEAT_S

from ..deps import Config, Db, Metrics
from ..errors import Unavailable
from ..responses import PUBLIC_ERRORS

__all__ = ["healthz", "metrics_text", "readyz", "router"]

router = APIRouter(tags=["operations"])


@router.get("/healthz", summary="The process is alive")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", responses=PUBLIC_ERRORS,
            summary="The database answers and the projection is caught up")
async def readyz(db: Db, settings: Config, metrics: Metrics) -> dict[str, Any]:
    try:
        lag, partitions, age = await db.lag()
    except Unavailable:
        metrics.db_up.set(0)
        raise
    metrics.db_up.set(1)
    metrics.lag.set(lag)
    metrics.heartbeat_age.set(float("nan") if age is None else age)
    if age is None:
        raise Unavailable("the projector has not reported a heartbeat yet", retry_after=5)
    if age > STALE_HEARTBEAT_S:
        raise Unavailable(f"the projector's last heartbeat is {age:.0f} s old, over "
                          f"{STALE_HEARTBEAT_S:.0f} s: it is down or cannot reach Kafka "
                          f"or PostgreSQL", retry_after=5)
    if lag > settings.max_lag:
        raise Unavailable(f"projection lag is {lag} records, over the bound of "
                          f"{settings.max_lag} (EVIDENCE_API_MAX_LAG)", retry_after=5)
    return {"status": "ready", "lag": lag, "partitions": partitions,
            "max_lag": settings.max_lag, "heartbeat_age_s": round(age, 1)}


@router.get("/metrics", response_class=Response,
            summary="Prometheus metrics (no API key: no tenant data in any label)")
async def metrics_text(db: Db, metrics: Metrics) -> Response:
    try:
        lag, _partitions, age = await db.lag()
        metrics.lag.set(lag)
        metrics.heartbeat_age.set(float("nan") if age is None else age)
        metrics.db_up.set(1)
    except Unavailable:
        metrics.db_up.set(0)  # keep serving the rest; the lag gauge keeps its last value
    return Response(metrics.render(), headers={"content-type": CONTENT_TYPE_LATEST})
