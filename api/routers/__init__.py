"""The API's routes, one :class:`fastapi.APIRouter` per resource.

    replay       POST /replay/verify, GET /replay/{content_key_hex}
    records      GET /streams, /streams/{stream}, /streams/{stream}/records[/{seq}],
                 /events/{event_id}
    audit        GET /streams/{stream}/audit
    fidelity     GET /streams/{stream}/records/{seq}/fidelity, POST /fidelity/analyze
    operations   GET /healthz, /readyz, /metrics (no API key)

:data:`ROUTERS` is the order :func:`api.app.create_app` includes them in: the order routes
are matched in and listed in the OpenAPI document.
"""

from . import audit, fidelity, operations, records, replay

__all__ = ["ROUTERS", "audit", "fidelity", "operations", "records", "replay"]

ROUTERS = (replay.router, records.router, audit.router, fidelity.router, operations.router)
