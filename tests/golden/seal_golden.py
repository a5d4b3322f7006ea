"""Make the golden log of one record-contract version, sealed by the code of that version.

    .venv/bin/python tests/golden/seal_golden.py 2.1 f4ec3cf --python /tmp/old/bin/python \
        > tests/golden/contract-2.1.json

checks the commit out into a temporary worktree (``git worktree add``), and runs this file
there in a process (``--python``: an interpreter with that version's contract dependencies,
e.g. a throwaway venv with its ``constraints.txt`` pins of fastavro, uuid6 and cryptography)
that imports that commit's contract (its ``schemas/`` folder, imported as
``evidence_contract`` as it always was) and its writer, nothing of this checkout. There the
captures of that version's own test vectors (``vectors.committed_event`` and the others it
has) are encoded by its codec, checked by its ``writer.core.validate`` and sealed by its
``writer.core.seal_capture``: two streams of a few records each, in one log partition, every
time and id fixed, so a rerun writes the same file. Where that version has Merkle trees
(2.0 on), the tree root of each stream comes from its own ``merkle.tree_root``; where its
writer signed checkpoints (2.1 on), each stream's checkpoint is signed by its own note code
with the fixed test key below. For 1.0, which had no trees, the root is the one this
checkout computes, pinned when the file was made.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

STREAMS = ("golden:a", "golden:b")
T0 = 1_764_547_200_000_000  # 2025-12-01T00:00:00Z
LOG_NAME = "golden.evidence.example"
LOG_KEY_SEED = bytes(range(0x40, 0x60))
"""The Ed25519 seed of the golden logs' checkpoint key: a test key, never use it elsewhere."""
LOG_KEY_NAME = LOG_NAME
ROOT = Path(__file__).resolve().parents[2]


def _events(vectors: Any) -> list[dict[str, Any]]:
    """Every kind of capture the version's vectors build."""
    names = ("committed_event", "failed_event", "truncated_event", "encrypted_event",
             "traced_event", "mapped_event")
    return [getattr(vectors, n)() for n in names if hasattr(vectors, n)]


def _seal_here(contract: str) -> dict[str, Any]:
    """Runs inside the old worktree (the current directory)."""
    import evidence_contract as c
    from evidence_contract import vectors
    from writer import core

    writer = dict(vectors._WRITER)
    kinds = _events(vectors)
    heads = {s: core.Head.genesis(s) for s in STREAMS}
    records, n = [], 0
    for round_ in range(2):
        for stream in STREAMS:
            for kind in kinds:
                n += 1
                event = dict(kind, stream=stream,
                             event_id=kind["event_id"][:-12] + f"{0xa00 + n:012x}")
                capture = core.validate(c.encode("CaptureEvent", event), stream.encode(), 1 << 20)
                assert isinstance(capture, core.Capture), capture
                value, heads[stream] = core.seal_capture(capture, heads[stream], T0 + n * 1000,
                                                         writer, 0, n - 1)
                records.append({"partition": 0, "offset": len(records), "value": value.hex()})
    out: dict[str, Any] = {
        "contract": contract,
        "schema_version": c.SCHEMA_VERSION,
        "records": records,
        "heads": {s: {"seq": h.seq, "record_digest": bytes(h.digest).hex()}
                  for s, h in heads.items()},
    }
    try:
        from evidence_contract import merkle
    except ImportError:
        return out
    trees = {}
    for stream in STREAMS:
        mine = [bytes.fromhex(r["value"]) for r in records
                if c.decode(bytes.fromhex(r["value"]))[1]["body"]["stream"] == stream]
        trees[stream] = {"size": len(mine), "root": merkle.tree_root(
            merkle.record_leaf_hash(v) for v in mine).hex(), "by": "the sealing code"}
    out["trees"] = trees
    try:
        from writer import checkpoints  # noqa: F401 - the writer signed checkpoints from here on
    except ImportError:
        return out
    from evidence_contract import note

    signer = note.SignerKey(LOG_KEY_NAME, note.SIG_ED25519, LOG_KEY_SEED)
    out["log_key"] = note.format_vkey(signer.verifier)
    out["log_name"] = LOG_NAME
    out["checkpoints"] = {}
    for stream, t in trees.items():
        text = note.format_checkpoint(note.Checkpoint(note.stream_origin(LOG_NAME, stream),
                                                      t["size"], bytes.fromhex(t["root"])))
        out["checkpoints"][stream] = note.format_note(text, [note.sign(signer, text)]).decode()
    return out


def _import_old_contract(worktree: Path) -> None:
    """Make ``evidence_contract`` the worktree's contract (its ``evidence_contract/`` folder,
    or ``schemas/`` before the contract had a folder of its name) and put the worktree first."""
    import importlib.util

    sys.path[:] = [str(worktree)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT]
    folder = worktree / "evidence_contract"
    if not (folder / "__init__.py").is_file():
        folder = worktree / "schemas"
    spec = importlib.util.spec_from_file_location(
        "evidence_contract", folder / "__init__.py", submodule_search_locations=[str(folder)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["evidence_contract"] = module
    spec.loader.exec_module(module)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--inside"]:
        contract, worktree = argv[1], Path(argv[2])
        _import_old_contract(worktree)
        print(json.dumps(_seal_here(contract)))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("contract", help="the contract version, e.g. 2.1")
    parser.add_argument("commit", help="the last commit that sealed records of that version")
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter to run that commit's code with")
    args = parser.parse_args(argv)
    contract, commit = args.contract, args.commit
    sha = subprocess.run(["git", "rev-parse", commit], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix=f"golden-{contract}-") as tmp:
        worktree = Path(tmp) / "wt"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(worktree), sha],
                       cwd=ROOT, check=True)
        try:
            got = subprocess.run([args.python, __file__, "--inside", contract, str(worktree)],
                                 cwd=worktree, capture_output=True, text=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=ROOT,
                           check=True)
    if got.returncode:
        sys.stderr.write(got.stderr)
        return got.returncode
    out = json.loads(got.stdout)
    if "trees" not in out:  # no Merkle trees in this version: pin this checkout's roots
        from evidence_contract import merkle, split_record

        out["trees"] = {}
        for stream in STREAMS:
            mine = [bytes.fromhex(r["value"]) for r in out["records"]]
            mine = [v for v in mine if split_record(v)[1]["body"]["stream"] == stream]
            out["trees"][stream] = {"size": len(mine), "by": "the code that made this file",
                                    "root": merkle.tree_root(map(merkle.record_leaf_hash,
                                                                 mine)).hex()}
    print(json.dumps({"contract": contract, "sealed_by": sha, **out}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
