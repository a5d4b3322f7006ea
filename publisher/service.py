"""The publisher: sign the deployment tree, push each checkpoint to the witnesses.

One process per deployment (docs/witnessing.md). It

1. **reads** ``<prefix>.tree`` (one partition, read_committed) from offset 0: every
   ``checkpoint`` message is the next entry of the deployment tree
   (:class:`publisher.core.DeploymentTree`), every ``log-checkpoint`` one a checkpoint signed
   before (by this process or an earlier run: the tree is the same for every reader, so a
   restart signs the same roots), every ``log-cosignature`` one a witness's cosignature held;
2. once it has read the topic to its end, **signs** a deployment checkpoint when the tree
   grew, at most once every ``interval_s``, and produces it to the tree topic (idempotent,
   acks=all) before any witness sees it: the log never shows a witness a checkpoint it could
   forget;
3. **pushes** the latest checkpoint to every witness of the witnesses file (re-read when it
   changes: no restart) with C2SP tlog-witness ``POST <url>/add-checkpoint``: ``old <size
   the witness holds>``, the consistency proof from it, the checkpoint. The proof's hashes
   come from the projection (``<views>.log_nodes``) and are checked here against the roots
   this process computed before they are sent: the projection is a cache, never trusted.
   A witness's cosignature is verified with its key and produced to the tree topic as a
   ``log-cosignature`` message, which the projector folds and the API serves with the
   checkpoint (``GET /log/checkpoint``).

Kafka, PostgreSQL or a witness being away is waited out: reading resumes where it was,
proofs are asked again on the next round, a witness is asked again after its back-off.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import httpx
import psycopg
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from evidence_contract.merkle import ProofError, consistency_nodes, consistency_proof_from
from evidence_contract.merkle import verify_consistency
from evidence_contract.note import (
    NoteError, Signature, SignerKey, VerifierKey, cosignature_timestamp, format_note,
    open_checkpoint, parse_note,
)
from evidence_contract.tlog import (
    KIND_HEADER, KIND_LOG_CHECKPOINT, KIND_LOG_COSIGNATURE, SIZE_HEADER, WITNESS_HEADER,
)
from evidence_contract.tlog import KIND_CHECKPOINT as KIND_ENTRY
from server.kafka import CATCH_UP
from server.logs import event_logger
from server.witnesses import WatchedWitnesses, Witness

from .config import PublisherConfig
from .core import (
    Answer, DeploymentTree, WitnessState, add_checkpoint_body, read_answer, sign_checkpoint,
)

__all__ = ["Publisher"]

log = event_logger("evidence.publisher")

_FLUSH_S = 30.0


def _header(headers, name: str) -> str | None:
    for k, v in headers or ():
        if k == name and v is not None:
            return bytes(v).decode("utf-8", "replace")
    return None


@dataclass
class _Witness:
    witness: Witness
    state: WitnessState = field(default_factory=WitnessState)

    @property
    def name(self) -> str:
        return self.witness.key.name


class Publisher:
    """See the module docstring. ``clock``: monotonic seconds (tests pass their own)."""

    def __init__(self, cfg: PublisherConfig, signer: SignerKey,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if signer.name != cfg.log_name:
            raise ValueError(f"the log key is named {signer.name!r}, the log {cfg.log_name!r}")
        self.cfg = cfg
        self.signer = signer
        self.verifier: VerifierKey = signer.verifier
        self.clock = clock
        self.tree = DeploymentTree()
        self.topic = cfg.topics.names.tree
        self.position = 0
        self.caught_up = False
        self._end_at_start: int | None = None
        self._held: dict[tuple[str, int], int] = {}  # witness (name, key id) -> largest cosigned
        self._witnesses: dict[tuple[str, int, str], _Witness] = {}
        self._watched = WatchedWitnesses(cfg.witnesses_file) if cfg.witnesses_file else None
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
        self._pg: psycopg.Connection | None = None
        self._http = httpx.Client(timeout=cfg.http_timeout_s, follow_redirects=False)
        self._stop = False
        self._warned: dict[str, float] = {}
        self.signed = 0
        self.cosignatures = 0

    # -- Kafka ------------------------------------------------------------------------------
    def consumer_config(self) -> dict:
        """The librdkafka settings of the consumer of the checkpoint topic."""
        return {
            "bootstrap.servers": self.cfg.bootstrap,
            "group.id": f"{self.topic}.publisher",  # never committed: assign() only
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "client.id": "evidence-publisher",
            **CATCH_UP,  # a restarted publisher reads the checkpoints it missed
        }

    def _kafka(self) -> tuple[Consumer, Producer]:
        if self._consumer is None:
            c = Consumer(self.consumer_config())
            c.assign([TopicPartition(self.topic, 0, self.position)])
            self._consumer = c
        if self._producer is None:
            self._producer = Producer({
                "bootstrap.servers": self.cfg.bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "client.id": "evidence-publisher",
                "linger.ms": 0,
            })
        return self._consumer, self._producer

    def _drop_kafka(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close()
            except (KafkaException, RuntimeError):
                pass
        self._consumer = None

    def read(self, timeout_s: float = 0.2, max_messages: int = 1000) -> int:
        """Fold what the tree topic has next; returns the messages read."""
        consumer, _ = self._kafka()
        if self._end_at_start is None:
            _low, high = consumer.get_watermark_offsets(TopicPartition(self.topic, 0),
                                                        timeout=10.0)
            self._end_at_start = high
            self.caught_up = high <= self.position
        msgs = consumer.consume(max_messages, timeout_s)
        n = 0
        for m in msgs:
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    self.caught_up = True
                    continue
                if err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise KafkaException(err)
                self._warn("kafka", "kafka_error", error=str(err))
                continue
            self._fold(m.offset(), m.value(), m.headers())
            self.position = m.offset() + 1
            n += 1
        if self._end_at_start is not None and self.position >= self._end_at_start:
            self.caught_up = True
        return n

    def _fold(self, offset: int, value: bytes | None, headers) -> None:
        kind = _header(headers, KIND_HEADER)
        if kind == KIND_ENTRY:
            # Whatever was committed is an entry: the tree is the same for every reader.
            self.tree.append(value or b"")
            return
        if kind not in (KIND_LOG_CHECKPOINT, KIND_LOG_COSIGNATURE) or value is None:
            return
        witnesses = [w.witness.key for w in self._witnesses.values()]
        try:
            cp, note = open_checkpoint(value, self.verifier, witnesses, origin=self.cfg.log_name)
        except NoteError as e:
            log("error", "foreign_checkpoint", offset=offset, kind=kind, error=str(e),
                message="a deployment checkpoint on the tree topic that this log's key did "
                        "not sign: someone else produces to it")
            return
        if cp.extensions:
            return
        if kind == KIND_LOG_CHECKPOINT:
            if cp.size == self.tree.size and cp.root_hash != self.tree.root():
                log("error", "fork_on_topic", offset=offset, size=cp.size,
                    message="a checkpoint signed with this log's key has another root than "
                            "the tree topic gives at its size")
            self.tree.saw_signed(cp.size, cp.root_hash)
            return
        for sig in note.verified:
            if (sig.name, sig.key_id) == (self.verifier.name, self.verifier.key_id):
                continue
            k = (sig.name, sig.key_id)
            self._held[k] = max(self._held.get(k, 0), cp.size)

    # -- signing ----------------------------------------------------------------------------
    def sign_due(self) -> int | None:
        """Sign and produce a checkpoint if one is due; returns its size."""
        if not self.caught_up or not self.tree.due(self.clock(), self.cfg.interval_s):
            return None
        size, root = self.tree.size, self.tree.root()
        _text, note = sign_checkpoint(self.signer, size, root)
        _, producer = self._kafka()
        self._produce(producer, note, [(KIND_HEADER, KIND_LOG_CHECKPOINT.encode()),
                                       (SIZE_HEADER, str(size).encode())])
        self.tree.signed_now(size, root, self.clock())
        self.signed += 1
        log("info", "signed", size=size, root=root.hex(), origin=self.cfg.log_name)
        return size

    def _produce(self, producer: Producer, value: bytes, headers: list) -> None:
        failed: list[str] = []

        def done(err, _msg) -> None:
            if err is not None:
                failed.append(str(err))

        producer.produce(self.topic, value, self.cfg.log_name.encode(), partition=0,
                         headers=headers, on_delivery=done)
        left = producer.flush(_FLUSH_S)
        if left or failed:
            raise KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT,
                                            f"the tree topic did not take the message: "
                                            f"{failed or 'flush timed out'}"))

    # -- pushing ----------------------------------------------------------------------------
    def witnesses(self) -> list[_Witness]:
        """The configured witnesses with a submission URL, as the file says now."""
        listed = self._watched.current() if self._watched is not None else ()
        keep: dict[tuple[str, int, str], _Witness] = {}
        for w in listed:
            if not w.url:
                continue
            k = (w.key.name, w.key.key_id, w.url)
            keep[k] = self._witnesses.get(k) or _Witness(w)
            held = self._held.get((w.key.name, w.key.key_id), 0)
            keep[k].state.cosigned = max(keep[k].state.cosigned, held)
        added = keep.keys() - self._witnesses.keys()
        removed = self._witnesses.keys() - keep.keys()
        for k in sorted(added):
            log("info", "witness_added", witness=k[0], url=k[2])
        for k in sorted(removed):
            log("info", "witness_removed", witness=k[0], url=k[2])
        self._witnesses = keep
        return list(keep.values())

    def push_round(self) -> dict[str, str]:
        """Push the latest signed checkpoint to each witness that wants it; returns each
        witness's outcome."""
        size = self.tree.last_size
        out: dict[str, str] = {}
        if not size or size not in self.tree.signed:
            return out
        now = self.clock()
        for w in self.witnesses():
            if w.state.wants(size, now):
                out[w.name] = self.push(w, size)
        return out

    def push(self, w: _Witness, size: int) -> str:
        """One witness, the checkpoint of ``size``: up to two requests (the second after a
        409 taught it the witness's size)."""
        root = self.tree.signed[size]
        text, note = sign_checkpoint(self.signer, size, root)
        for _ in range(2):
            old = w.state.old()
            if old > size:
                return self._refused(w, size, "ahead", f"the witness holds size {old}, more "
                                     f"than this log's {size}: it saw another tree")
            proof = self._proof(old, size)
            if proof is None:
                w.state.back_off(self.clock())
                w.state.last = "proof_unavailable"
                return w.state.last
            answer, retry_after = self._post(w, add_checkpoint_body(old, proof, note), text)
            if answer.kind == "size" and answer.size is not None and answer.size != old:
                w.state.holds = answer.size
                continue
            return self._handle(w, size, text, parse_note(note).signatures[0], answer,
                                retry_after)
        return self._refused(w, size, "failed", "the witness keeps answering 409")

    def _post(self, w: _Witness, body: bytes, text: str) -> tuple[Answer, float | None]:
        url = w.witness.url.rstrip("/") + "/add-checkpoint"
        try:
            r = self._http.post(url, content=body)
        except httpx.HTTPError as e:
            return Answer("busy", f"{type(e).__name__}: {e}"), None
        retry = r.headers.get("retry-after", "")
        return (read_answer(r.status_code, r.headers.get("content-type", ""), r.content,
                            w.witness.key, text),
                float(retry) if retry.isdigit() else None)

    def _handle(self, w: _Witness, size: int, text: str, log_sig: Signature, a: Answer,
                retry_after: float | None) -> str:
        st = w.state
        if a.kind == "cosigned":
            for sig in a.cosignatures:
                _, producer = self._kafka()
                self._produce(producer, format_note(text, [log_sig, sig]), [
                    (KIND_HEADER, KIND_LOG_COSIGNATURE.encode()),
                    (SIZE_HEADER, str(size).encode()), (WITNESS_HEADER, sig.name.encode())])
                self.cosignatures += 1
                ts = cosignature_timestamp(sig) if len(sig.data) == 72 else None
                log("info", "cosigned", witness=w.name, size=size, timestamp=ts)
            st.took(size)
            self._held[(w.witness.key.name, w.witness.key.key_id)] = st.cosigned
            return "cosigned"
        if a.kind == "forked":
            st.refused.add(size)
            return self._refused(w, size, "forked", a.detail)
        if a.kind == "busy":
            wait = st.back_off(self.clock(), retry_after)
            st.last = "busy"
            self._warn(f"busy:{w.name}", "witness_busy", witness=w.name, size=size,
                       detail=a.detail, retry_in_s=wait)
            return "busy"
        return self._refused(w, size, a.kind, a.detail)

    def _refused(self, w: _Witness, size: int, kind: str, detail: str) -> str:
        wait = w.state.back_off(self.clock())
        if kind in ("unknown_log", "ahead"):
            wait = w.state.back_off(self.clock(), 60.0)
        w.state.last = kind
        level = "error" if kind in ("forked", "ahead") else "warning"
        log(level, "witness_refused", witness=w.name, url=w.witness.url, size=size, kind=kind,
            detail=detail, retry_in_s=wait)
        return kind

    def _proof(self, old: int, size: int) -> list[bytes] | None:
        """The consistency proof from ``old`` to ``size``, from the projection's nodes,
        checked against this process's roots; None when it cannot be had (yet)."""
        if old == 0 or old == size:
            return []
        wanted = consistency_nodes(old, size)
        try:
            nodes = self._nodes(wanted)
        except psycopg.Error as e:
            self._drop_pg()
            self._warn("pg", "proof_unavailable", error=str(e).strip(),
                       message="PostgreSQL is not answering; the push is tried again")
            return None
        if any(w not in nodes for w in wanted):
            self._warn("lag", "proof_unavailable", old=old, size=size,
                       message="the projection has not folded the tree that far yet")
            return None
        proof = consistency_proof_from(old, size, lambda lv, i: nodes[(lv, i)])
        old_root = self.tree.signed.get(old)
        if old_root is not None:
            try:
                verify_consistency(old, size, proof, old_root, self.tree.signed[size])
            except ProofError as e:
                self._warn("badproof", "projection_disagrees", old=old, size=size,
                           error=str(e), message="the projection's tree nodes do not prove "
                           "what this log signed; rebuild the projections")
                return None
        return proof

    def _nodes(self, wanted: list[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
        if self._pg is None:
            self._pg = psycopg.connect(self.cfg.database_url, autocommit=True,
                                       application_name="evidence-publisher", connect_timeout=5)
        levels = [lv for lv, _ in wanted]
        idxs = [i for _, i in wanted]
        rows = self._pg.execute(
            f'select level, idx, hash from "{self.cfg.views_schema}".log_nodes '
            f"where (level, idx) in (select * from unnest(%s::smallint[], %s::bigint[]))",
            (levels, idxs)).fetchall()
        return {(lv, i): bytes(h) for lv, i, h in rows}

    def _drop_pg(self) -> None:
        if self._pg is not None:
            try:
                self._pg.close()
            except psycopg.Error:
                pass
        self._pg = None

    def _warn(self, key: str, event: str, **fields) -> None:
        """A warning at most once a minute per ``key``."""
        now = self.clock()
        if now - self._warned.get(key, -1e9) >= 60.0:
            self._warned[key] = now
            log("warning", event, **fields)

    # -- the loop ---------------------------------------------------------------------------
    def step(self) -> None:
        """Read, sign what is due, push: one round."""
        self.read()
        self.sign_due()
        self.push_round()

    def run(self, should_stop: Callable[[], bool] | None = None) -> None:
        stop = should_stop or (lambda: self._stop)
        backoff = 0.5
        log("info", "started", origin=self.cfg.log_name, topic=self.topic,
            key_id=f"{self.verifier.key_id:08x}", interval_s=self.cfg.interval_s,
            witnesses_file=self.cfg.witnesses_file or None)
        while not stop():
            try:
                self.step()
                backoff = 0.5
            except KafkaException as e:
                log("warning", "kafka_unavailable", error=str(e), retry_in_s=backoff)
                self._drop_kafka()
                deadline = self.clock() + backoff
                while not stop() and self.clock() < deadline:
                    time.sleep(0.05)
                backoff = min(backoff * 2, 10.0)
        log("info", "stopped", size=self.tree.size, signed=self.tree.last_size)

    def request_stop(self) -> None:
        self._stop = True

    def close(self) -> None:
        self._drop_kafka()
        if self._producer is not None:
            self._producer.flush(5.0)
            self._producer = None
        self._drop_pg()
        self._http.close()
