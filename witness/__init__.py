"""The witness: a small service of its own that cosigns a log's checkpoints (issue 12).

A witness holds its own key (Ed25519 or ML-DSA-44) and state directory. It cosigns (C2SP
tlog-cosignature) the log's deployment checkpoint (origin = the log key's name, pushed by the
publisher) or a stream's checkpoint only when a consistency proof shows it extends the last one
it cosigned for that origin, and refuses, loudly and on record, every other. The log serves what it
cosigned beside its own signature; an auditor asks the witness directly.

- :mod:`witness.core` — the decision (pure): :func:`check`, :func:`cosign`, the refusal
  kinds, the tlog-witness ``add-checkpoint`` body.
- :mod:`witness.state` — its key file (0600) and state directory (atomic writes).
- :mod:`witness.service` — :class:`Witness`: polls the log's API, submits cosignatures,
  serves ``GET /checkpoints/<origin>``, ``GET /refusals`` and ``POST /add-checkpoint``.

``evidence witness keygen NAME`` / ``evidence witness run ...`` on the command line.
"""

from witness.core import REFUSALS, Cosigned, Refusal, check, cosign
from witness.errors import WitnessError
from witness.service import Witness, WitnessConfig
from witness.state import StateDir, keygen, load_key

__all__ = ["REFUSALS", "Cosigned", "Refusal", "StateDir", "Witness", "WitnessConfig",
           "WitnessError", "check", "cosign", "keygen", "load_key"]
