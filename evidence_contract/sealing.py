"""Sealing and opening a capture's content under its subject's data key (contract 2.1).

Needs ``cryptography`` (the contract's ``[encrypt]`` extra); nothing else of the contract
imports this module, so a client with the plain policy works without it. Pure: bytes and
keys in, bytes out; the only other input is randomness (``os.urandom`` nonces and keys).
The format is :mod:`evidence_contract.envelope`.

    keys = SubjectKeys(key_id, data_key)          # HKDF: an AEAD key and a commitment key
    keys.content_key(request)                     # HMAC-SHA-256(commitment key, 0x10 || ...)
    env = keys.seal(b"...", stream, event_id, "response_bytes")
    keys.open(env, stream, event_id, "response_bytes")
    sealed = seal_body(body, keys)                # every content field of a CaptureEvent
    plain = open_body(sealed, keys)

:class:`SubjectKeys` has the digest functions' names (``content_key``, ``response_digest``,
``input_digest``, ``prompt_digest``, ``output_digest``, ``chunk_digest``), so code that builds
a capture takes either it or the :mod:`evidence_contract.digests` module.

Key encryption: a data key is stored wrapped by a key-encryption key (KEK) with AES key wrap
(RFC 3394): :func:`wrap_key` / :func:`unwrap_key` and :class:`LocalKek`, the
:class:`~evidence_contract.keys.KeyWrapper` that key stores use when the KEK is a local
secret.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import os
from typing import Any, Callable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.keywrap import InvalidUnwrap, aes_key_unwrap, aes_key_wrap

from . import envelope as fmt
from .errors import EvidenceError

__all__ = [
    "DATA_KEY_SIZE",
    "KEK_SIZE",
    "LocalKek",
    "OpenError",
    "SubjectKeys",
    "derive",
    "new_data_key",
    "new_key_id",
    "open_body",
    "seal_body",
    "unwrap_key",
    "wrap_key",
]

DATA_KEY_SIZE = 32
KEK_SIZE = 32


class OpenError(EvidenceError):
    """An envelope does not open: another key, another place (associated data), or altered."""


def new_data_key() -> bytes:
    """A fresh random 32-byte data key."""
    return os.urandom(DATA_KEY_SIZE)


def new_key_id() -> str:
    """A fresh random key id, as ``encryption.key_id`` holds it (32 hex digits)."""
    return os.urandom(fmt.KEY_ID_SIZE).hex()


def derive(data_key: bytes, info: bytes) -> bytes:
    """HKDF-SHA-256 (RFC 5869) of ``data_key`` with an empty salt: 32 bytes for ``info``."""
    if len(data_key) != DATA_KEY_SIZE:
        raise ValueError(f"a data key is {DATA_KEY_SIZE} bytes, not {len(data_key)}")
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(bytes(data_key))


def _commit(key: bytes, kind: str, data: bytes) -> bytes:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"data must be bytes, not {type(data).__name__}")
    h = hmac.new(key, fmt.COMMITMENT_PREFIXES[kind], hashlib.sha256)
    h.update(data)
    return h.digest()


class SubjectKeys:
    """The AEAD and the commitments of one data key (one subject's)."""

    __slots__ = ("key_id", "_aead", "_commit_key")

    def __init__(self, key_id: str, data_key: bytes) -> None:
        if not fmt.valid_key_id(key_id):
            raise ValueError(f"key id {key_id!r} is not 32 lowercase hex digits")
        self.key_id = key_id
        self._aead = AESGCM(derive(data_key, fmt.AEAD_INFO))
        self._commit_key = derive(data_key, fmt.COMMITMENT_INFO)

    def __repr__(self) -> str:  # never the key material
        return f"SubjectKeys(key_id={self.key_id!r})"

    # -- keyed commitments (the digest functions' names) -------------------------------------
    def content_key(self, request: bytes) -> bytes:
        return _commit(self._commit_key, "content_key", request)

    def response_digest(self, response: bytes) -> bytes:
        return _commit(self._commit_key, "response_digest", response)

    def input_digest(self, data: bytes) -> bytes:
        return _commit(self._commit_key, "input_digest", data)

    def prompt_digest(self, data: bytes) -> bytes:
        return _commit(self._commit_key, "prompt_digest", data)

    def chunk_digest(self, data: bytes) -> bytes:
        return _commit(self._commit_key, "chunk_digest", data)

    def output_digest(self, text: str) -> bytes:
        if not isinstance(text, str):
            raise TypeError(f"text must be str, not {type(text).__name__}")
        return _commit(self._commit_key, "output_digest", text.encode("utf-8"))

    # -- envelopes ---------------------------------------------------------------------------
    def seal(self, plaintext: bytes, stream: str, event_id: str, field: str,
             nonce: bytes | None = None) -> bytes:
        """The envelope of ``plaintext`` for ``field`` of capture ``event_id`` in ``stream``.

        ``nonce`` is for test vectors only: a nonce must never repeat under one key, so
        leave it to ``os.urandom`` (96 random bits per envelope).
        """
        nonce = os.urandom(fmt.NONCE_SIZE) if nonce is None else bytes(nonce)
        header = bytes([fmt.VERSION]) + bytes.fromhex(self.key_id) + nonce
        aad = fmt.associated_data(header, stream, event_id, field)
        return fmt.compose(bytes.fromhex(self.key_id), nonce,
                           self._aead.encrypt(nonce, bytes(plaintext), aad))

    def open(self, envelope: bytes, stream: str, event_id: str, field: str) -> bytes:
        """The plaintext of ``envelope``; :class:`OpenError` unless it was sealed under this
        key for exactly this stream, event id and field, and is unaltered."""
        try:
            key_id, nonce, sealed = fmt.parse(envelope)
        except ValueError as e:
            raise OpenError(str(e)) from None
        if key_id.hex() != self.key_id:
            raise OpenError(f"{field} is sealed under key {key_id.hex()}, not {self.key_id}")
        aad = fmt.associated_data(bytes(envelope[:fmt.HEADER_SIZE]), stream, event_id, field)
        try:
            return self._aead.decrypt(nonce, sealed, aad)
        except InvalidTag:
            raise OpenError(f"{field} does not open: altered, or not sealed for this stream, "
                            f"event id and field") from None


def _each_field(body: dict[str, Any], fn: Callable[[bytes, str], bytes]) -> dict[str, Any]:
    out = copy.copy(body)
    for name in fmt.SEALED_BYTES:
        if out[name] is not None:
            out[name] = fn(out[name], name)
    out["retrieval"] = [
        {**c, "chunk_bytes": None if c["chunk_bytes"] is None
         else fn(c["chunk_bytes"], fmt.chunk_field(i))}
        for i, c in enumerate(body["retrieval"])]
    return out


def seal_body(body: dict[str, Any], keys: SubjectKeys,
              nonces: Callable[[], bytes] | None = None) -> dict[str, Any]:
    """``body`` (a plain CaptureEvent dict) with every content field sealed under ``keys``.

    The digests must already be ``keys``' commitments (build the capture with ``keys`` as
    its digest functions); this seals the bytes, ``params`` (as base64 text), and sets
    ``encryption``. ``request_length`` / ``response_length`` stay the plaintext lengths.
    ``nonces`` is for test vectors only (default: random).
    """
    if body.get("encryption") is not None:
        raise ValueError("the capture is sealed already")
    stream, event_id = body["stream"], body["event_id"]

    def seal(data: bytes, name: str) -> bytes:
        return keys.seal(data, stream, event_id, name, nonces() if nonces else None)

    out = _each_field(body, seal)
    if body["params"] is not None:
        out["params"] = fmt.params_text(seal(body["params"].encode("utf-8"), "params"))
    out["encryption"] = {"scheme": fmt.SCHEME, "key_id": keys.key_id}
    return out


def open_body(body: dict[str, Any], keys: SubjectKeys) -> dict[str, Any]:
    """The plain CaptureEvent dict of an encrypted one (``encryption`` kept, digests stay
    keyed commitments); :class:`OpenError` if any field does not open."""
    enc = body.get("encryption")
    if enc is None:
        return body
    if enc["scheme"] != fmt.SCHEME:
        raise OpenError(f"unknown encryption scheme {enc['scheme']!r}")
    stream, event_id = body["stream"], body["event_id"]
    out = _each_field(body, lambda data, name: keys.open(data, stream, event_id, name))
    if body["params"] is not None:
        try:
            env = fmt.params_envelope(body["params"])
        except ValueError as e:
            raise OpenError(str(e)) from None
        out["params"] = keys.open(env, stream, event_id, "params").decode("utf-8")
    return out


def wrap_key(kek: bytes, data_key: bytes) -> bytes:
    """``data_key`` wrapped by ``kek`` (AES key wrap, RFC 3394): 40 bytes."""
    if len(kek) != KEK_SIZE:
        raise ValueError(f"a key-encryption key is {KEK_SIZE} bytes, not {len(kek)}")
    return aes_key_wrap(bytes(kek), bytes(data_key))


def unwrap_key(kek: bytes, wrapped: bytes) -> bytes:
    """The data key in ``wrapped``; :class:`OpenError` under another KEK or if altered."""
    try:
        return aes_key_unwrap(bytes(kek), bytes(wrapped))
    except InvalidUnwrap:
        raise OpenError("the data key does not unwrap under this key-encryption key") from None


class LocalKek:
    """A :class:`~evidence_contract.keys.KeyWrapper` over a local 32-byte KEK (AES-KW).

    ``kek_id`` names the KEK in stored keys (so a store can tell which KEK wrapped what, and
    re-wrap on rotation); by default the first 8 bytes of SHA-256 of the KEK, in hex.
    """

    __slots__ = ("kek_id", "_kek")

    def __init__(self, kek: bytes, kek_id: str | None = None) -> None:
        if len(kek) != KEK_SIZE:
            raise ValueError(f"a key-encryption key is {KEK_SIZE} bytes, not {len(kek)}")
        self._kek = bytes(kek)
        self.kek_id = kek_id or "local:" + hashlib.sha256(b"kek id\n" + self._kek).hexdigest()[:16]

    def __repr__(self) -> str:
        return f"LocalKek(kek_id={self.kek_id!r})"

    def wrap(self, key_id: str, data_key: bytes) -> bytes:
        return wrap_key(self._kek, data_key)

    def unwrap(self, key_id: str, wrapped: bytes) -> bytes:
        return unwrap_key(self._kek, wrapped)
