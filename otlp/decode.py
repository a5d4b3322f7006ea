"""OTLP/HTTP bodies to export requests, and the receiver's responses back to bytes.

Pure: bytes and header values in, protobuf messages out. The rules come from the OTLP
specification's OTLP/HTTP section:

- ``application/x-protobuf`` is the binary protobuf encoding; ``application/json`` is the
  proto3 JSON mapping with OTLP's exceptions: ``traceId``/``spanId``/``parentSpanId`` are
  case-insensitive hex strings (not base64), enums are integers, keys lowerCamelCase, and
  unknown fields are ignored.
- ``Content-Encoding: gzip`` is allowed; the size cap applies to the decompressed body, which
  is inflated incrementally so a small gzip bomb never grows past the cap in memory.
- A response is encoded in the request's content type: ``Export*ServiceResponse`` with
  ``partial_success`` on 200, a ``google.rpc.Status`` on 400.
"""

from __future__ import annotations

import binascii
import json
import zlib
from typing import Any, Literal, TypeVar

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from google.rpc import status_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from otlp.errors import BadRequestError, TooLargeError, UnsupportedMediaError

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
MediaType = Literal["application/x-protobuf", "application/json"]

DEFAULT_MAX_BODY = 8 * 1024 * 1024
"""The default cap on a decompressed body, in bytes."""

# The id fields OTLP/JSON writes as hex (the specification's "JSON Protobuf Encoding"); in
# every other bytes field the proto3 mapping's base64 holds.
_HEX_ID_FIELDS = frozenset({"traceId", "spanId", "parentSpanId", "trace_id", "span_id",
                            "parent_span_id"})
_CHUNK = 64 * 1024

M = TypeVar("M", bound=Message)


def media_type(content_type: str | None) -> MediaType:
    """The OTLP media type of a ``Content-Type`` value (parameters such as charset ignored).

    Raises UnsupportedMediaError for anything but protobuf or JSON.
    """
    essence = (content_type or "").split(";", 1)[0].strip().lower()
    if essence == PROTOBUF:
        return PROTOBUF
    if essence == JSON:
        return JSON
    raise UnsupportedMediaError(
        f"unsupported content type {content_type!r}: OTLP/HTTP takes {PROTOBUF} or {JSON}")


def decompress(body: bytes, content_encoding: str | None, max_body: int) -> bytes:
    """The body as sent, inflated when ``content_encoding`` is gzip, at most ``max_body`` bytes.

    Raises TooLargeError past the cap (checked while inflating, never after),
    UnsupportedMediaError for an encoding other than gzip or identity, BadRequestError for a
    corrupt gzip stream.
    """
    encoding = (content_encoding or "identity").strip().lower()
    if encoding == "identity":
        if len(body) > max_body:
            raise TooLargeError(max_body)
        return body
    if encoding != "gzip":
        raise UnsupportedMediaError(
            f"unsupported content encoding {content_encoding!r}: OTLP/HTTP takes gzip or none")
    return _gunzip(body, max_body)


def _gunzip(body: bytes, max_body: int) -> bytes:
    out = bytearray()
    rest = body
    try:
        while True:  # one pass per gzip member (RFC 1952 allows several, concatenated)
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            pending = rest
            while pending and not inflater.eof:
                # max_length bounds what one call may produce: at most one byte past the cap
                out += inflater.decompress(pending, max_body + 1 - len(out))
                if len(out) > max_body:
                    raise TooLargeError(max_body)
                pending = inflater.unconsumed_tail
            if not inflater.eof:
                raise BadRequestError("the gzip stream is truncated")
            rest = inflater.unused_data
            if not rest:
                return bytes(out)
    except zlib.error as e:
        raise BadRequestError(f"the body is not valid gzip: {e}") from e


def decode_traces(body: bytes, content_type: str | None, content_encoding: str | None = None,
                  *, max_body: int = DEFAULT_MAX_BODY) -> ExportTraceServiceRequest:
    """An OTLP/HTTP ``/v1/traces`` body as the ExportTraceServiceRequest it carries."""
    return _decode(ExportTraceServiceRequest(), body, content_type, content_encoding, max_body)


def decode_logs(body: bytes, content_type: str | None, content_encoding: str | None = None,
                *, max_body: int = DEFAULT_MAX_BODY) -> ExportLogsServiceRequest:
    """An OTLP/HTTP ``/v1/logs`` body as the ExportLogsServiceRequest it carries."""
    return _decode(ExportLogsServiceRequest(), body, content_type, content_encoding, max_body)


def _decode(message: M, body: bytes, content_type: str | None, content_encoding: str | None,
            max_body: int) -> M:
    kind = media_type(content_type)  # 415 before any work on the body
    raw = decompress(body, content_encoding, max_body)
    if kind == PROTOBUF:
        try:
            message.ParseFromString(raw)
        except DecodeError as e:
            raise BadRequestError(
                f"the body is not a protobuf {message.DESCRIPTOR.name}: {e}") from e
        return message
    return _parse_json(message, raw)


def _parse_json(message: M, raw: bytes) -> M:
    try:
        document = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as e:
        raise BadRequestError(f"the body is not JSON: {e}") from e
    if not isinstance(document, dict):
        raise BadRequestError(f"the body is not a JSON {message.DESCRIPTOR.name} object")
    try:
        json_format.ParseDict(_ids_to_base64(document), message, ignore_unknown_fields=True)
    except json_format.ParseError as e:
        raise BadRequestError(f"the body is not an OTLP/JSON {message.DESCRIPTOR.name}: {e}") \
            from e
    return message


def _ids_to_base64(node: Any) -> Any:
    """The document with every hex id rewritten in the base64 the proto3 mapping reads."""
    if isinstance(node, list):
        return [_ids_to_base64(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _HEX_ID_FIELDS and isinstance(value, str):
            out[key] = _hex_to_base64(key, value)
        elif key == "attributes" or key == "body" or key == "value":
            # AnyValue trees are never ids; bytesValue inside them stays base64
            out[key] = value
        else:
            out[key] = _ids_to_base64(value)
    return out


def _hex_to_base64(key: str, value: str) -> str:
    try:
        raw = bytes.fromhex(value)
    except ValueError as e:
        raise BadRequestError(f"{key} {value!r} is not a hex string") from e
    return binascii.b2a_base64(raw, newline=False).decode("ascii")


def encode(message: Message, kind: MediaType) -> bytes:
    """A response message in the request's media type (proto3 JSON for JSON)."""
    if kind == PROTOBUF:
        return message.SerializeToString()
    return json_format.MessageToJson(message, indent=None).encode("utf-8")


def trace_response(kind: MediaType, rejected_spans: int = 0, error_message: str = "") -> bytes:
    """The 200 body of ``/v1/traces``; ``partial_success`` set only when something was dropped
    or there is a warning to give, as the specification asks."""
    response = ExportTraceServiceResponse()
    if rejected_spans or error_message:
        response.partial_success.rejected_spans = rejected_spans
        response.partial_success.error_message = error_message
    return encode(response, kind)


def logs_response(kind: MediaType, rejected_log_records: int = 0,
                  error_message: str = "") -> bytes:
    """The 200 body of ``/v1/logs``, as :func:`trace_response`."""
    response = ExportLogsServiceResponse()
    if rejected_log_records or error_message:
        response.partial_success.rejected_log_records = rejected_log_records
        response.partial_success.error_message = error_message
    return encode(response, kind)


# google.rpc.Code for a 400 (the code the OTLP specification pairs with "bad data")
_INVALID_ARGUMENT = 3


def status_body(kind: MediaType, message: str, code: int = _INVALID_ARGUMENT) -> bytes:
    """A ``google.rpc.Status`` body for an error response, in the request's media type."""
    return encode(status_pb2.Status(code=code, message=message), kind)
