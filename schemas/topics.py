"""The topic names of the wire contract: where captures go and where records are read.

A producer in any language sends CaptureEvents to ``<prefix>.intake``, keyed by the stream id
(UTF-8); sealed records are on ``<prefix>.log``. The default prefix is ``evidence``. The
topics' configurations (partitions, retention) are the server's business: ``topics.spec``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TopicNames"]


@dataclass(frozen=True)
class TopicNames:
    """The topic names under one prefix; tests use a random prefix per test."""

    prefix: str = "evidence"

    @property
    def intake(self) -> str:
        return f"{self.prefix}.intake"

    @property
    def log(self) -> str:
        return f"{self.prefix}.log"

    @property
    def writer_state(self) -> str:
        return f"{self.prefix}.writer-state"

    @property
    def rejected(self) -> str:
        return f"{self.prefix}.rejected"

    def all(self) -> tuple[str, str, str, str]:
        return (self.intake, self.log, self.writer_state, self.rejected)
