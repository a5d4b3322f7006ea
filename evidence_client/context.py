"""Per-call context the application attaches: which stream a call goes to, and what only the
application knows about it (the end-user input, the rendered prompt, the retrieved chunks).

Both are :mod:`contextvars`, so they follow the code that makes the call: a thread, an asyncio
task (copied when the task is created), a ``with`` block::

    with evidence_client.stream("acme:tenant-42"):          # this block's calls go there
        with evidence_client.call_context(
                input=user_text,                            # as received, before any cleanup
                prompt=rendered_prompt,                     # the exact text sent as the prompt
                retrieval=[Chunk("kb/refunds.md", "v7", chunk_text)]):
            client.chat.completions.create(...)

The capture transport reads them once, when the request starts. The gateway computes
``input_digest`` (0x02), ``prompt_digest`` (0x03) and each ``chunk_digest`` (0x06) over the
bytes given (``str`` is taken as its UTF-8) and, under request policy VALUE, keeps the bytes
too; under HASH_ONLY only the digests leave the process.

``subject`` names whose content the call carries (an end user's pseudonymous id), for a
Recorder whose content policy is ``encrypt``: the call is sealed under that subject's data
key, so erasing the subject shreds exactly that person's captures. Without it the subject is
the call's stream. Use an opaque id, never an e-mail address: the key store keeps it.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from typing import Iterable, Iterator

from evidence_contract import valid_stream_id
from evidence_contract.keys import valid_subject

from .errors import ConfigError

__all__ = ["CallContext", "Chunk", "call_context", "current_call", "current_stream", "stream"]


def _as_bytes(name: str, value: bytes | str | None) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise ConfigError(f"{name} must be bytes or str, not {type(value).__name__}")


@dataclass(frozen=True)
class Chunk:
    """One retrieved chunk as it went into the prompt."""

    doc_id: str
    doc_version: str | None
    data: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.doc_id, str) or not self.doc_id:
            raise ConfigError("Chunk.doc_id must be a non-empty str")
        if self.doc_version is not None and not isinstance(self.doc_version, str):
            raise ConfigError("Chunk.doc_version must be a str or None")
        object.__setattr__(self, "data", _as_bytes("Chunk.data", self.data))
        if self.data is None:
            raise ConfigError("Chunk.data is required")


@dataclass(frozen=True)
class CallContext:
    """What the application attached to the calls made inside one :func:`call_context`."""

    input: bytes | None = None
    prompt: bytes | None = None
    retrieval: tuple[Chunk, ...] = ()
    subject: str | None = None


_STREAM: contextvars.ContextVar[str | None] = contextvars.ContextVar("evidence_stream",
                                                                    default=None)
_CALL: contextvars.ContextVar[CallContext | None] = contextvars.ContextVar("evidence_call",
                                                                          default=None)


@contextlib.contextmanager
def stream(stream_id: str) -> Iterator[str]:
    """Calls made inside the block are recorded in ``stream_id`` (over a client's own)."""
    if not valid_stream_id(stream_id):
        raise ConfigError(f"stream {stream_id!r} is not a stream id ([A-Za-z0-9._:-]{{1,128}})")
    token = _STREAM.set(stream_id)
    try:
        yield stream_id
    finally:
        _STREAM.reset(token)


@contextlib.contextmanager
def call_context(*, input: bytes | str | None = None, prompt: bytes | str | None = None,
                 retrieval: Iterable[Chunk] = (),
                 subject: str | None = None) -> Iterator[CallContext]:
    """Attach the end-user input, the rendered prompt, the retrieved chunks and the data
    subject to the calls made inside the block (normally one)."""
    chunks = tuple(retrieval)
    for c in chunks:
        if not isinstance(c, Chunk):
            raise ConfigError(f"retrieval items must be Chunk, not {type(c).__name__}")
    if subject is not None and not valid_subject(subject):
        raise ConfigError(f"subject {subject!r} is not a subject id (1 to 256 bytes, printable)")
    ctx = CallContext(_as_bytes("input", input), _as_bytes("prompt", prompt), chunks, subject)
    token = _CALL.set(ctx)
    try:
        yield ctx
    finally:
        _CALL.reset(token)


def current_stream() -> str | None:
    """The stream set by the innermost :func:`stream` block, if any."""
    return _STREAM.get()


def current_call() -> CallContext | None:
    """The context set by the innermost :func:`call_context` block, if any."""
    return _CALL.get()
