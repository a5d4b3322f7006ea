"""``evidence otlp``: the OTLP/HTTP receiver, a Starlette app served by uvicorn.

``POST /v1/traces`` and ``POST /v1/logs`` as the OTLP/HTTP specification has them; every
request is taken in these steps:

1. the content type (protobuf or JSON, else 415) and the body, read up to the size cap
   (413; the cap applies again, exactly, once gzip is removed);
2. decoded into the export request (400 with a ``google.rpc.Status``: not retried) and mapped,
   each GenAI span or inference event to a capture (:mod:`otlp.capture`), off the event loop;
3. the captures produced to ``<prefix>.intake`` (:mod:`otlp.intake`), and only when Kafka
   acknowledged every one, 200 with ``partial_success`` counting the GenAI items that could
   not be captures. Kafka's queue full is 429, Kafka away or slow 503, both with
   ``Retry-After`` and a Status body: the exporter sends the request again, and the writer
   absorbs what had reached it (the event ids are derived from the spans).

Spans that are not GenAI inference calls are accepted and not kept: they are not evidence, and
not an error of the sender's, so they are not counted as rejected. Every answer is in the
request's media type (a 415 for an unknown type in JSON). ``GET /healthz`` says the process
serves, and whether Kafka was last seen reachable.
"""

from __future__ import annotations

import contextlib
from typing import AsyncIterator

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from evidence_contract import encode
from evidence_contract.errors import EncodeError
from server.logs import event_logger

from .capture import Mapped, captures_in_logs, captures_in_traces
from .config import ReceiverConfig
from .decode import (JSON, MediaType, decode_logs, decode_traces, decompress, logs_response,
                     media_type, status_body, trace_response)
from .errors import OtlpError, TooLargeError, UnmappableError, UnsupportedMediaError
from .intake import Intake, IntakeBusy, IntakeUnavailable

__all__ = ["Receiver", "create_app", "serve"]

log = event_logger("evidence.otlp")

_UNAVAILABLE, _RESOURCE_EXHAUSTED = 14, 8  # google.rpc.Code of 503 and 429


class Receiver:
    """What the routes share: the settings, the receiver's version and the intake producer."""

    def __init__(self, config: ReceiverConfig, version: str, intake: Intake | None = None) -> None:
        self.config = config
        self.version = version
        self.intake = intake or Intake(
            config.bootstrap, config.names.intake, delivery_timeout_s=config.delivery_timeout_s,
            queue_max_messages=config.queue_max_messages)

    def map(self, body: bytes, content_type: str | None, content_encoding: str | None,
            kind: str) -> tuple[Mapped, list[tuple[bytes, bytes]]]:
        """Step 2: the body decoded and mapped, each capture encoded as its intake message.
        Raises :class:`OtlpError` (400 / 413 / 415)."""
        cap = self.config.max_body_bytes
        raw = decompress(body, content_encoding, cap)
        streams = self.config.streams
        if kind == "traces":
            mapped = captures_in_traces(decode_traces(raw, content_type, max_body=cap), raw,
                                        streams, self.version)
        else:
            mapped = captures_in_logs(decode_logs(raw, content_type, max_body=cap), raw,
                                      streams, self.version)
        messages = []
        for capture in mapped.captures:
            try:
                messages.append((capture["stream"].encode("utf-8"),
                                 encode("CaptureEvent", capture)))
            except EncodeError as e:  # a receiver bug: told to the exporter, never a 500
                log("error", "otlp_capture_not_encoded", event_id=capture["event_id"],
                    error=str(e))
                mapped.reject(UnmappableError(
                    f"capture {capture['event_id']} could not be encoded: {e}"))
        return mapped, messages


async def _body(request: Request, cap: int) -> bytes:
    """The body as sent, at most about ``cap`` bytes (a gzip body of incompressible data is a
    little larger than what it inflates to; the exact cap is checked once it is inflated)."""
    limit = cap + cap // 100 + 1024
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise TooLargeError(cap)
    out = bytearray()
    async for chunk in request.stream():
        out += chunk
        if len(out) > limit:
            raise TooLargeError(cap)
    return bytes(out)


def _status(kind: MediaType, status: int, message: str, code: int = 3,
            headers: dict[str, str] | None = None) -> Response:
    return Response(status_body(kind, message, code), status_code=status, media_type=kind,
                    headers=headers)


async def _export(request: Request, kind: str) -> Response:
    receiver: Receiver = request.app.state.receiver
    content_type = request.headers.get("content-type")
    try:                                                                     # 1
        media = media_type(content_type)
    except UnsupportedMediaError as e:
        return _status(JSON, e.status, str(e))
    try:
        body = await _body(request, receiver.config.max_body_bytes)
        mapped, messages = await run_in_threadpool(                          # 2
            receiver.map, body, content_type, request.headers.get("content-encoding"), kind)
    except OtlpError as e:
        log("info", "otlp_refused", path=request.url.path, status=e.status, error=str(e))
        return _status(media, e.status, str(e))
    retry = {"Retry-After": str(receiver.config.retry_after_s)}
    try:
        await receiver.intake.send(messages)                                 # 3
    except IntakeBusy as e:
        log("warning", "otlp_throttled", path=request.url.path, captures=len(messages),
            error=str(e))
        return _status(media, e.status, str(e), _RESOURCE_EXHAUSTED, retry)
    except IntakeUnavailable as e:
        log("warning", "otlp_kafka_unavailable", path=request.url.path, captures=len(messages),
            error=str(e))
        return _status(media, e.status, str(e), _UNAVAILABLE, retry)
    if mapped.rejected:
        log("info", "otlp_partial", path=request.url.path, captures=len(messages),
            rejected=mapped.rejected, error=mapped.error_message)
    answer = trace_response if kind == "traces" else logs_response
    return Response(answer(media, mapped.rejected, mapped.error_message), media_type=media)


async def traces(request: Request) -> Response:
    """``POST /v1/traces``: the GenAI spans of an ExportTraceServiceRequest as captures."""
    return await _export(request, "traces")


async def logs(request: Request) -> Response:
    """``POST /v1/logs``: the inference events of an ExportLogsServiceRequest as captures."""
    return await _export(request, "logs")


async def healthz(request: Request) -> Response:
    """The process serves (200 always); ``kafka`` is ``down`` while the brokers were last seen
    unreachable, when exports are answered 503."""
    receiver: Receiver = request.app.state.receiver
    return JSONResponse({"status": "ok",
                         "kafka": "down" if receiver.intake.brokers_down else "up",
                         "topic": receiver.intake.topic})


def create_app(receiver: Receiver) -> Starlette:
    """The receiver's app; its lifespan starts the intake producer and closes it."""

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        receiver.intake.start()
        log("info", "otlp_started", topic=receiver.intake.topic,
            stream=receiver.config.stream, stream_by_service=receiver.config.stream_by_service,
            max_body_bytes=receiver.config.max_body_bytes, version=receiver.version)
        try:
            yield
        finally:
            await run_in_threadpool(receiver.intake.close)

    app = Starlette(routes=[
        Route("/v1/traces", traces, methods=["POST"]),
        Route("/v1/logs", logs, methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
    ], lifespan=lifespan)
    app.state.receiver = receiver
    return app


def serve(config: ReceiverConfig, version: str, log_level: str = "info") -> int:
    """Serve until SIGTERM/SIGINT (uvicorn re-raises the signal once it has shut down); 1 when
    the server could not start (the port taken, say)."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(
        create_app(Receiver(config, version)), host=config.host, port=config.port,
        log_level=log_level, log_config=None, access_log=False, server_header=False,
        lifespan="on"))
    server.run()
    return 0 if server.started else 1
