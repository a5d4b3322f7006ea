"""The writer's errors, under the project's root ``evidence_contract.EvidenceError``.

    EvidenceError
    ├── WriterError                  the writer cannot go on
    │   ├── WriterKafkaError         a Kafka client error; keeps librdkafka's code and flags
    │   │   ├── FencedError          this transactional/group identity was fenced (by another
    │   │   │                        writer, or by the coordinator after a timed-out transaction)
    │   │   └── WedgedError          a librdkafka call did not return within its own timeout
    │   ├── StateMismatchError       writer-state heads disagree with the tail of the log
    │   └── SigningKeyError          the log signing key cannot be used (start refused)
    └── server.kafka.KafkaClientError  (WriterKafkaError is one; FencedError also a
        └── server.kafka.FencedError    server.kafka.FencedError)

librdkafka errors are translated in one place, :mod:`server.kafka` (the writer calls it through
``writer.kafka_io.kafka_errors``); branch on these classes and flags, never on message text.
Bad input is never an error: it is a Rejection.

What the service does with them (:mod:`writer.service`): every ``WriterKafkaError`` (and a
``WriterError`` of a partition's restore) is healed by making the Kafka clients anew, with
backoff; a ``FencedError`` ends the writer (exit 3) only when another live writer holds the
identity; a ``StateMismatchError`` ends it (exit 1).
"""

from __future__ import annotations

from evidence_contract import EvidenceError
from server import kafka

__all__ = ["CommitUnknownError", "FencedError", "SigningKeyError", "StateMismatchError",
           "WedgedError", "WriterError", "WriterKafkaError"]


class WriterError(EvidenceError):
    """Root of the writer's errors."""


class WriterKafkaError(WriterError, kafka.KafkaClientError):
    """A Kafka client error. ``code``/``name`` are librdkafka's; the flags are its verdict."""


class FencedError(WriterKafkaError, kafka.FencedError):
    """This writer's transactional id (or group instance id) was fenced: by another writer
    with the same identity, or by the coordinator itself (it bumps the producer epoch when it
    aborts a transaction that timed out, e.g. across a broker restart)."""


class WedgedError(WriterKafkaError):
    """A blocking librdkafka call did not return within its own timeout plus a grace period
    (librdkafka issues #5456 and #5511: ``send_offsets_to_transaction`` waits forever for a
    coordinator it cached before a broker restart). The client is abandoned, never reused."""


class CommitUnknownError(WriterError):
    """commit_transaction kept failing retriably past its bound (a producer whose coordinator
    connection did not come back after a broker stall: each retry times out with the request
    still queued). The outcome is unknown, so the batch must neither be aborted and resealed
    on this producer nor committed again: the service makes its clients anew, and the new
    producer's init_transactions completes or aborts the transaction before the heads are
    restored from the log. Not a Kafka error of the call: the seal loop does not abort on it."""


class StateMismatchError(WriterError):
    """The restored stream heads do not match the last records of the log: refuse to seal."""


class SigningKeyError(WriterError):
    """The log signing key file is missing, readable by others, malformed, or named other
    than the log: the writer refuses to start rather than sign with it."""
