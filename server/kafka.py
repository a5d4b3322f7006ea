"""The one place a librdkafka error becomes an error of this project.

    EvidenceError (evidence_contract)
    └── KafkaClientError       a Kafka client error: librdkafka's code, name and flags kept
        └── FencedError        another client took over this transactional / group instance id

A component subclasses these so that its callers keep catching the component's root (the
writer's ``WriterKafkaError(WriterError, KafkaClientError)``, the projections' ``LogError``,
the audit's ``AuditKafkaError``) and passes its class to :func:`translate` or
:func:`kafka_errors`. Branch on the classes and on the flags, never on message text: the flags
are librdkafka's verdict (``retriable``: the same call may succeed if repeated;
``txn_requires_abort``: the transaction must be aborted, then the producer is usable again;
``fatal``: the client instance is unusable).

It also holds the one consumer setting every component's readers share: :data:`CATCH_UP`.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from confluent_kafka import KafkaError, KafkaException

from evidence_contract import EvidenceError

__all__ = ["CATCH_UP", "FENCED_CODES", "FencedError", "KafkaClientError", "error_of",
           "is_fatal", "is_fenced", "kafka_errors", "translate", "translate_exception"]

CATCH_UP = {"fetch.queue.backoff.ms": 10}
"""Settings of every consumer of this project that may meet a backlog (the writer's intake and
restore, the projector, the audit, the publisher). librdkafka stops fetching a partition once
its local queue is full (``queued.max.messages.kbytes``: 64 MiB by default) and looks again
only ``fetch.queue.backoff.ms`` later: 1 s by default, although a busy reader drains that
queue in a fraction of it, then waits for the rest with nothing to do. Looking again after
10 ms is a local check, not a request to the broker. The writer sealing a pre-loaded intake of
200k captures (``bench/seal_rate.py``: 1 KiB responses, 6 partitions; three runs each,
alternating) went from 48-52k to 68-73k records/s with this and the writer's smaller queue
(``writer.kafka_io.consumer_config``). A projection rebuild is bound by its CPU, not by its
fetches: 200k records, two runs each, within the runs' noise."""

FENCED_CODES = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                          KafkaError.INVALID_PRODUCER_EPOCH, KafkaError.FENCED_INSTANCE_ID})
"""Codes meaning another client with our transactional id or group instance id took over."""


class KafkaClientError(EvidenceError):
    """A Kafka client error. ``code``/``name`` are librdkafka's (None when the client gave
    no error object); the flags are its verdict on what may be done next."""

    def __init__(self, message: str, *, code: int | None = None, name: str | None = None,
                 fatal: bool = False, retriable: bool = False,
                 txn_requires_abort: bool = False) -> None:
        super().__init__(f"{message} [{name} ({code})]" if name is not None else message)
        self.code = code
        self.name = name
        self.fatal = fatal
        self.retriable = retriable
        self.txn_requires_abort = txn_requires_abort


class FencedError(KafkaClientError):
    """Another client with the same transactional id (or group instance id) fenced this one."""


def is_fenced(err: KafkaError, consumer: bool = False) -> bool:
    """Fencing by code. A consumer reports a fatal error only as ``_FATAL``, and the only fatal
    consumer error in librdkafka is static-membership fencing (FENCED_INSTANCE_ID: another
    member joined with our group.instance.id), so for a consumer ``_FATAL`` means fenced."""
    code = err.code()
    return code in FENCED_CODES or (consumer and code == KafkaError._FATAL)


def is_fatal(err: KafkaError) -> bool:
    """The client instance cannot go on: librdkafka's fatal flag, ``_FATAL`` or fencing."""
    return err.fatal() or err.code() == KafkaError._FATAL or err.code() in FENCED_CODES


def translate(err: KafkaError, what: str, cls: type[KafkaClientError] = KafkaClientError, *,
              fenced_cls: type[KafkaClientError] = FencedError,
              consumer: bool = False) -> KafkaClientError:
    """``err`` as a ``cls`` saying ``what`` failed, with librdkafka's code, name and flags.

    Fencing becomes ``fenced_cls`` when that is a kind of ``cls`` (so that callers catching
    ``cls`` still catch it), else plain ``cls`` with ``fatal`` set.
    """
    fenced = is_fenced(err, consumer)
    kind = fenced_cls if fenced and issubclass(fenced_cls, cls) else cls
    return kind(f"{what}: {err.str()}", code=err.code(), name=err.name(),
                fatal=err.fatal() or err.code() == KafkaError._FATAL,
                retriable=err.retriable(), txn_requires_abort=err.txn_requires_abort())


def error_of(exc: KafkaException) -> KafkaError | None:
    """The librdkafka error a ``KafkaException`` carries, if it carries one."""
    arg = exc.args[0] if exc.args else None
    return arg if isinstance(arg, KafkaError) else None


@contextlib.contextmanager
def kafka_errors(what: str, cls: type[KafkaClientError] = KafkaClientError, *,
                 fenced_cls: type[KafkaClientError] = FencedError,
                 consumer: bool = False) -> Iterator[None]:
    """Translate a ``KafkaException`` raised inside the block (see :func:`translate`); the
    original stays the ``__cause__``."""
    try:
        yield
    except KafkaException as e:
        raise translate_exception(e, what, cls, fenced_cls=fenced_cls, consumer=consumer) from e


def translate_exception(exc: KafkaException, what: str,
                        cls: type[KafkaClientError] = KafkaClientError, *,
                        fenced_cls: type[KafkaClientError] = FencedError,
                        consumer: bool = False) -> KafkaClientError:
    """What :func:`kafka_errors` raises for ``exc``, for an ``except KafkaException`` of
    one's own (raise it ``from exc``). An exception without a librdkafka error is UNKNOWN."""
    err = error_of(exc)
    if err is None:
        return cls(f"{what}: {exc}", code=KafkaError.UNKNOWN, name="UNKNOWN")
    return translate(err, what, cls, fenced_cls=fenced_cls, consumer=consumer)
