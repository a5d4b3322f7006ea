"""Structured logs for every service: one JSON object per line, ``event`` naming what happened.

A line is ``{"ts": <unix seconds, 6 decimals>, "level": "info", "logger": "evidence.writer",
"event": "started", **fields}``; tests and operators parse these lines, so the shape is fixed
here and nowhere else. It is plain :mod:`logging` underneath:

- :func:`configure` is called once by a service's main (``evidence writer``, ``evidence
  projector``, ``evidence api``, ...): it puts the one :class:`JsonFormatter` on the root
  logger, so third-party loggers (uvicorn) write the same lines.
- :func:`event_logger` gives a module a ``log(level, event, **fields)`` callable backed by
  ``logging.getLogger(name)``; a library that is not run by a configured main stays silent
  below WARNING, as any library using :mod:`logging` does.

This is the one way the services log (the writer, the projector, the publisher, the API, the
witness, the shredder): an ``event`` is a stable snake_case name that tests and operators
match, and what varies goes in ``fields``, never into the event's text.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any, Callable, TextIO

__all__ = ["EventLog", "JsonFormatter", "configure", "event_logger"]

EventLog = Callable[..., None]
"""``log(level, event, **fields)``: ``level`` is ``"debug"``, ``"info"``, ``"warning"``,
``"error"`` or ``"critical"``; ``fields`` become keys of the line."""

_FIELDS = "evidence_fields"  # the LogRecord attribute that carries an event's fields
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR, "critical": logging.CRITICAL}


class JsonFormatter(logging.Formatter):
    """Formats a record as the one line shape; a plain ``logger.info("...")`` message becomes
    the ``event``, and an exception its ``exc_info`` field."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {"ts": round(record.created, 6), "level": record.levelname.lower(),
                 "logger": record.name, "event": record.getMessage(),
                 **getattr(record, _FIELDS, {})}
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, separators=(",", ":"))


class _Handler(logging.StreamHandler):
    """The handler :func:`configure` installs; marked so that a second call replaces it."""


def configure(level: str = "info", stream: TextIO | None = None) -> None:
    """Send every logger's records at ``level`` and above to ``stream`` (stderr when None,
    looked up at call time) as JSON lines. Calling it again replaces the previous set-up."""
    root = logging.getLogger()
    for h in [h for h in root.handlers if isinstance(h, _Handler)]:
        root.removeHandler(h)
    handler = _Handler(sys.stderr if stream is None else stream)
    handler.setFormatter(JsonFormatter())
    root.addHandler(handler)
    root.setLevel(_LEVELS[level.lower()])


def event_logger(name: str) -> EventLog:
    """``log(level, event, **fields)`` writing to ``logging.getLogger(name)``; an
    ``exc_info=`` exception (or True, in an ``except``) becomes the line's ``exc_info``."""
    logger = logging.getLogger(name)

    def log(level: str, event: str, /, *, exc_info: Any = None, **fields: Any) -> None:
        number = _LEVELS[level]
        if logger.isEnabledFor(number):
            logger.log(number, event, exc_info=exc_info, extra={_FIELDS: fields})

    return log
