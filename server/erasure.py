"""Erasing a subject: destroy its keys, then ask the writer for a signed receipt.

One function does both steps for every caller (``evidence erase``, ``POST /admin/erasures``,
the retention shredder): :func:`erase_subject`.

1. ``KeyStore.destroy(subject, request_id)`` shreds every live key of the subject. From here
   on its content is unrecoverable, whatever happens next.
2. An intake control message (key = the request id, header ``evidence-control: erase``, value
   ``evidence_contract.erasure.encode_request``: the key ids destroyed, when, the reason) is
   produced idempotently and flushed. The writer signs a receipt with the log key and produces
   it to ``<prefix>.erasures`` in its batch transaction (``writer.erasures``). The message
   never names the subject: the log learns which key ids were destroyed, not whose.

A subject with no keys (none live, none erased under this request id) is not erased: nothing
is destroyed and no receipt is asked for (:class:`NothingToErase`, which names the requests
that erased its keys before, if any), unless the caller asks for a receipt anyway
(``seal_if_none=True``: the writer then seals a receipt that names no key).

Order and retries: destroying first means a failure to produce leaves the keys destroyed and
no receipt yet. Calling again with the *same request id* is the remedy and is safe: the key
ids are collected from the store's tombstones of that request (not only from what this call
destroyed), so the retry's message names the same keys, and the writer receipts a request id
once per partition (the key routes it to the same one).
"""

from __future__ import annotations

import uuid
from typing import Any, Mapping

from confluent_kafka import KafkaException, Producer

from evidence_contract import now_micros
from evidence_contract.errors import EvidenceError
from evidence_contract.erasure import (
    CONTROL_ERASE,
    ErasureRequest,
    encode_request,
    valid_request_id,
)
from evidence_contract.keys import ERASED, KeyStore, valid_subject
from evidence_contract.tlog import CONTROL_HEADER
from evidence_contract.topics import TopicNames
from server.kafka import KafkaClientError, translate_exception
from server.settings import Connection

__all__ = ["ErasureFailed", "NothingToErase", "erase_subject", "new_request_id",
           "producer_config"]

FLUSH_TIMEOUT_S = 30.0


class ErasureFailed(KafkaClientError):
    """The keys are destroyed but the request did not reach intake: retry with the same
    request id (module docstring)."""


class NothingToErase(EvidenceError, LookupError):
    """The subject has no keys to destroy (none live, none erased under this request id):
    nothing was erased and no receipt asked for. ``erased_by``: the request ids that erased
    its keys before, if any."""

    def __init__(self, subject: str, request_id: str, erased_by: tuple[str, ...]) -> None:
        self.subject, self.request_id, self.erased_by = subject, request_id, erased_by
        before = (f"; its keys were erased before, under request {', '.join(erased_by)}"
                  if erased_by else "")
        super().__init__(f"subject {subject!r} has no keys to erase{before}: nothing was "
                         f"erased and no receipt sealed")


def new_request_id() -> str:
    return f"erase-{uuid.uuid4().hex}"


def producer_config(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The control message producer's settings from ``EVIDENCE_KAFKA_BOOTSTRAP`` (the
    topic prefix is ``EVIDENCE_TOPIC_PREFIX``: pass ``TopicNames`` to :func:`erase_subject`)."""
    return {"bootstrap.servers": Connection.from_env(env).bootstrap}


def erase_subject(store: KeyStore, producer_cfg: Mapping[str, Any], subject: str,
                  request_id: str | None = None, reason: str | None = None, *,
                  topics: TopicNames | None = None,
                  seal_if_none: bool = False) -> ErasureRequest:
    """Destroy ``subject``'s keys and send the erasure request to the writer; returns the
    request (key ids, when, request id). ``producer_cfg`` is confluent-kafka's settings
    (at least ``bootstrap.servers``); ``topics`` the stack's names (default prefix
    ``evidence``). Raises ``ValueError`` for a bad subject, request id or reason,
    ``KeyStoreError`` from the store (``LegalHold``: nothing destroyed),
    :class:`NothingToErase` when the subject has no keys and not ``seal_if_none``,
    :class:`ErasureFailed` when the request could not be delivered (the keys are destroyed by
    then: retry with the same request id)."""
    if not valid_subject(subject):
        raise ValueError(f"subject {subject!r} is not a subject id")
    request_id = request_id or new_request_id()
    if not valid_request_id(request_id):
        raise ValueError(f"request id {request_id!r} is not one (1-200 of [A-Za-z0-9._:@/+=-])")
    ErasureRequest(request_id, (), 0, reason)  # checks the reason before anything is destroyed
    # 1. Destroy. The tombstones of this request (a retry's too) give the key ids and when.
    destroyed = store.destroy(subject, request_id)
    erased = [s for s in store.subjects() if s.subject == subject and s.state == ERASED]
    states = {s.key_id: s for s in [*(s for s in erased if s.request_id == request_id),
                                    *destroyed]}
    if not states and not seal_if_none:
        raise NothingToErase(subject, request_id, tuple(sorted(
            {s.request_id for s in erased if s.request_id})))
    erased_at = max((s.erased_at or 0 for s in states.values()), default=0) or now_micros()
    req = ErasureRequest(request_id, tuple(sorted(states)), erased_at, reason)
    # 2. The control message, idempotent and flushed before we answer.
    _send(producer_cfg, (topics or TopicNames()).intake, req)
    return req


def _send(producer_cfg: Mapping[str, Any], topic: str, req: ErasureRequest) -> None:
    errors: list[Any] = []
    cfg = {"enable.idempotence": True, "acks": "all", "partitioner": "murmur2_random",
           **producer_cfg}
    try:
        producer = Producer(cfg)
        producer.produce(topic, encode_request(req), req.request_id.encode("utf-8"),
                         headers=[(CONTROL_HEADER, CONTROL_ERASE.encode("ascii"))],
                         on_delivery=lambda err, _msg: errors.append(err) if err else None)
        left = producer.flush(FLUSH_TIMEOUT_S)
    except KafkaException as e:
        raise translate_exception(e, f"erasure request {req.request_id} to {topic}",
                                  ErasureFailed) from e
    except BufferError as e:
        raise ErasureFailed(f"erasure request {req.request_id}: producer queue full") from e
    if errors:
        err = errors[0]
        raise ErasureFailed(f"erasure request {req.request_id} to {topic}: {err.str()} "
                            f"(the keys are destroyed; retry with the same request id)",
                            code=err.code(), name=err.name(), retriable=err.retriable())
    if left:
        raise ErasureFailed(f"erasure request {req.request_id} to {topic}: not delivered in "
                            f"{FLUSH_TIMEOUT_S:.0f} s (the keys are destroyed; retry with the "
                            f"same request id)", retriable=True)
