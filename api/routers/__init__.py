"""The API's routes, one :class:`fastapi.APIRouter` per resource.

    replay       POST /replay/verify, GET /replay/{content_key_hex}
    bundles      GET /replay/{content_key_hex}/bundle, /streams/{stream}/records/{seq}/bundle:
                 a record with its proofs, for readers that verify
    records      GET /streams, /streams/{stream}, /streams/{stream}/records[/{seq}],
                 /events/{event_id}, /traces/{trace_id}/records
    audit        GET /streams/{stream}/audit
    fidelity     GET /streams/{stream}/records/{seq}/fidelity, POST /fidelity/analyze
    tlog         GET /streams/{stream}/checkpoint, /streams/{stream}/proof/inclusion,
                 /streams/{stream}/proof/consistency, /log/key (no API key),
                 POST /streams/{stream}/checkpoint/cosignatures
    publiclog    GET /log/checkpoint, /log/tile/..., /log/streams/{stream}/checkpoint,
                 /log/streams/{stream}/tile/... (no API key): C2SP tlog-tiles of the
                 deployment log and of each stream's tree
    admin        POST /admin/erasures (API keys with the admin role)
    operations   GET /healthz, /readyz, /metrics (no API key)

:data:`ROUTERS` is the order :func:`api.app.create_app` includes them in: the order routes
are matched in and listed in the OpenAPI document.
"""

from . import admin, audit, bundles, fidelity, operations, publiclog, records, replay, tlog

__all__ = ["ROUTERS", "admin", "audit", "bundles", "fidelity", "operations", "publiclog",
           "records", "replay", "tlog"]

ROUTERS = (replay.router, bundles.router, records.router, audit.router, fidelity.router, tlog.router,
           publiclog.router, admin.router, operations.router)
