"""What the publisher decides, over bytes and values (pure).

The publisher signs the deployment tree (docs/witnessing.md): the tree whose entries are the
stream checkpoints on ``<prefix>.tree``, in their order there. Three things, each here without
Kafka, HTTP or a clock:

- :class:`DeploymentTree` folds the tree topic's messages: a ``checkpoint`` message appends its
  value (the entry) to the compact range; a ``log-checkpoint`` message (one this publisher, or
  an earlier run of it, signed) is remembered by size and root. It says when a checkpoint is
  due: the tree grew since the last one signed, and at least ``interval_s`` passed since then.
- :func:`sign_checkpoint` makes the deployment checkpoint: origin = the log key's name, size,
  root, no extension lines, signed by the log key.
- The C2SP tlog-witness client side (https://c2sp.org/tlog-witness): the ``add-checkpoint``
  body (:func:`add_checkpoint_body`), what each answer means (:func:`read_answer`), and one
  witness's state between pushes (:class:`WitnessState`: the size it is known to hold, the
  back-off after a refusal or an overload).
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field

from evidence_contract.merkle import CompactRange, leaf_hash
from evidence_contract.note import (
    Checkpoint, NoteError, Signature, SignerKey, VerifierKey, format_checkpoint, format_note,
    parse_note, sign, verify,
)

__all__ = [
    "Answer",
    "DeploymentTree",
    "WitnessState",
    "add_checkpoint_body",
    "read_answer",
    "sign_checkpoint",
]

BACKOFF_MIN_S, BACKOFF_MAX_S = 1.0, 300.0
"""A witness that is overloaded or refuses is asked again after this, doubling up to the max."""
_SIZE_BODY = re.compile(r"(0|[1-9][0-9]{0,19})\n?")


class DeploymentTree:
    """The deployment tree as far as the tree topic has been read, and what was signed."""

    def __init__(self) -> None:
        self.range = CompactRange()
        self.signed: dict[int, bytes] = {}
        """Size -> root of every deployment checkpoint seen (signed here or read back)."""
        self.last_size = 0
        """The largest size signed (0: none)."""
        self.last_at: float | None = None
        """Monotonic seconds when this process last signed (None: not yet)."""

    @property
    def size(self) -> int:
        return self.range.size

    def root(self) -> bytes:
        return self.range.root()

    def append(self, entry: bytes) -> None:
        """A ``checkpoint`` message of the tree topic: the next entry."""
        self.range.append(leaf_hash(bytes(entry)))

    def saw_signed(self, size: int, root: bytes) -> None:
        """A ``log-checkpoint`` message read back from the tree topic."""
        self.signed[size] = bytes(root)
        self.last_size = max(self.last_size, size)

    def due(self, now_s: float, interval_s: float) -> bool:
        """Whether to sign now: the tree grew past the last checkpoint, and the last one this
        process signed is at least ``interval_s`` old (the bound on the witnesses' load)."""
        if self.size <= self.last_size:
            return False
        return self.last_at is None or now_s - self.last_at >= interval_s

    def signed_now(self, size: int, root: bytes, now_s: float) -> None:
        self.saw_signed(size, root)
        self.last_at = now_s


def sign_checkpoint(signer: SignerKey, size: int, root: bytes) -> tuple[str, bytes]:
    """The deployment checkpoint of ``size`` leaves with ``root``: (its text, the note)."""
    text = format_checkpoint(Checkpoint(signer.name, size, root))
    return text, format_note(text, [sign(signer, text)])


def add_checkpoint_body(old: int, proof: list[bytes], note: bytes) -> bytes:
    """The body of ``POST <witness>/add-checkpoint``: ``old <size>``, one base64 proof hash
    a line, a blank line, then the signed checkpoint."""
    lines = [f"old {old}\n"] + [base64.b64encode(h).decode("ascii") + "\n" for h in proof]
    return ("".join(lines) + "\n").encode("ascii") + note


@dataclass(frozen=True)
class Answer:
    """What a witness's answer to ``add-checkpoint`` means for the publisher."""

    kind: str
    """``cosigned`` | ``size`` (409: it holds another size) | ``busy`` (503, 429) |
    ``unknown_log`` (403, 404) | ``forked`` (422) | ``bad_request`` (400) | ``failed``."""
    detail: str = ""
    size: int | None = None
    """For ``size``: the size the witness holds."""
    cosignatures: tuple[Signature, ...] = ()
    """For ``cosigned``: the witness's cosignature line(s), verified."""


def read_answer(status: int, content_type: str, body: bytes, witness: VerifierKey,
                text: str) -> Answer:
    """Read a witness's answer to the checkpoint with note text ``text``.

    A 200 must carry at least one signature line that verifies with ``witness``'s key over
    ``text``; anything else in a 200 is a ``failed`` answer (the witness is misconfigured, or
    is not the key the publisher was given)."""
    snippet = body[:200].decode("utf-8", "replace").strip()
    if status == 200:
        try:
            lines = parse_note(text.encode("utf-8") + b"\n" + body).signatures
        except NoteError as e:
            return Answer("failed", f"the 200 body is no cosignature: {e}")
        good = tuple(s for s in lines if verify(witness, text, s))
        if not good:
            return Answer("failed", f"no cosignature in the answer verifies with "
                                    f"{witness.name}+{witness.key_id:08x}")
        return Answer("cosigned", cosignatures=good)
    if status == 409:
        m = _SIZE_BODY.fullmatch(body.decode("ascii", "replace"))
        if content_type.split(";")[0].strip().lower() != "text/x.tlog.size" or m is None:
            return Answer("failed", f"409 without a text/x.tlog.size body: {snippet!r}")
        return Answer("size", size=int(m.group(1)))
    if status in (429, 503):
        return Answer("busy", snippet)
    if status in (403, 404):
        return Answer("unknown_log", f"{status}: {snippet}")
    if status == 422:
        return Answer("forked", snippet)
    if status == 400:
        return Answer("bad_request", snippet)
    return Answer("failed", f"{status}: {snippet}")


@dataclass
class WitnessState:
    """One witness, as the publisher knows it between pushes."""

    holds: int | None = None
    """The size it holds for the log (from its 409 or its cosignature); None: not known yet
    (the next push says ``old 0``, and a witness that holds more answers with its size)."""
    cosigned: int = 0
    """The largest size it cosigned for this publisher."""
    next_at: float = 0.0
    """Monotonic seconds before which it is not asked again."""
    backoff_s: float = 0.0
    refused: set[int] = field(default_factory=set)
    """Sizes it answered 422 for: never sent again."""
    last: str = ""
    """The last outcome, for status and logs."""

    def wants(self, size: int, now_s: float) -> bool:
        """Whether to push the checkpoint of ``size`` to it now."""
        return now_s >= self.next_at and size not in self.refused and self.cosigned < size

    def old(self) -> int:
        """The ``old`` size of the next push."""
        return self.holds or 0

    def back_off(self, now_s: float, retry_after_s: float | None = None) -> float:
        self.backoff_s = min(BACKOFF_MAX_S, max(BACKOFF_MIN_S, self.backoff_s * 2))
        wait = max(self.backoff_s, retry_after_s or 0.0)
        self.next_at = now_s + wait
        return wait

    def took(self, size: int) -> None:
        """It cosigned the checkpoint of ``size``."""
        self.holds, self.cosigned = size, max(self.cosigned, size)
        self.backoff_s, self.next_at, self.last = 0.0, 0.0, "cosigned"
