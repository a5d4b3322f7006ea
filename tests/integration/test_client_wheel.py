"""The client distribution on its own: build the wheels of packaging/contract and
packaging/client, install ``evidence-store-client`` (and the openai SDK) into a fresh venv
that sees nothing of this repository, and prove three things there:

1. nothing of the server came along: no top-level ``api``, ``schemas``, ``topics``, ``writer``,
   ``projections``, ``cli``, ``devstack``, ``audit`` or ``fidelity`` package, and no FastAPI,
   uvicorn, psycopg or jsonschema distribution (cryptography comes, for verified replay);
2. an application with packages of its own called ``api`` and ``schemas`` imports them and
   ``evidence_client`` side by side (no name clash);
3. that application's call to the fake provider through the official openai SDK, recorded by
   ``evidence_client.Recorder``, is sealed by the real writer on ``<prefix>.log`` exactly once,
   with the content_key of the bytes the provider received.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
import zipfile
from pathlib import Path

import pytest

import evidence_contract as schemas
from tests.fixtures.writer import ROOT, read_all, wait_for_count

pytestmark = pytest.mark.integration

SERVER_PACKAGES = ("api", "schemas", "topics", "writer", "projections", "cli", "devstack",
                   "audit", "fidelity", "server", "testing", "chaos", "gateway")
CHECKOUT_ONLY = ("devstack", "testing", "tests", "bench", "chaos", "examples", "native", "tools")
"""Top-level folders that run from a checkout (`make up`, `make test`, `evidence demo`) and ship
in no wheel."""
SERVER_DISTRIBUTIONS = ("evidence-store", "fastapi", "starlette", "uvicorn", "psycopg",
                        "psycopg-binary", "psycopg-pool", "psycopg2", "psycopg2-binary",
                        "jsonschema")
# cryptography is not among them: the Replayer verifies every answer against Ed25519-signed
# checkpoints, so the client depends on the contract's [tlog] extra.

# Run inside the fresh venv, with -I (isolated: no cwd, no PYTHONPATH, no user site).
INSPECT = textwrap.dedent("""
    import importlib.metadata as md, importlib.util, json, pkgutil, sys
    server_pkgs, server_dists = json.loads(sys.argv[1])
    dists = sorted({d.metadata["Name"].lower().replace("_", "-") for d in md.distributions()})
    top = sorted({m.name for m in pkgutil.iter_modules()
                  if m.module_finder.path.endswith("site-packages")})
    print(json.dumps({
        "dists": dists,
        "top_level": top,
        "found_server_packages": [n for n in server_pkgs
                                  if importlib.util.find_spec(n) is not None],
        "found_server_dists": [n for n in server_dists if n in dists],
        "client_requires": md.requires("evidence-store-client"),
        "contract_requires": md.requires("evidence-store-contract"),
        "client_file": importlib.util.find_spec("evidence_client").origin,
        "recorder_file": importlib.util.find_spec("evidence_client.recorder").origin,
        "sys_path": sys.path,
    }))
""")

# Run inside the fresh venv: the installed contract reads its .avsc files from the wheel.
DECODE = textwrap.dedent("""
    import json, sys
    import evidence_contract
    from evidence_contract.files import SCHEMAS_DIR
    print(json.dumps({"schemas_dir": str(SCHEMAS_DIR), "versions": [
        evidence_contract.split_record(bytes.fromhex(v))[1]["body"]["schema_version"]
        for v in json.loads(sys.argv[1])]}))
""")

APP = textwrap.dedent("""
    # An application that happens to have packages called `api` and `schemas` of its own.
    import json, os, sys
    from pathlib import Path

    import api
    import schemas
    import evidence_client
    import openai

    here = Path(__file__).resolve().parent
    assert Path(api.__file__).resolve().parent == here / "api", api.__file__
    assert Path(schemas.__file__).resolve().parent == here / "schemas", schemas.__file__
    assert api.WHO == "the app's own api" and schemas.WHO == "the app's own schemas"

    recorder = evidence_client.Recorder(
        bootstrap_servers=os.environ["APP_KAFKA"], stream=os.environ["APP_STREAM"],
        topic_prefix=os.environ["APP_PREFIX"], spool_dir=os.environ["APP_SPOOL"])
    client = openai.OpenAI(base_url=os.environ["APP_PROVIDER"] + "/v1", api_key="x",
                           max_retries=0, http_client=recorder.http_client())
    marker = os.environ["APP_MARKER"]
    out = client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": marker}])
    client.close()
    recorder.close(timeout=20)
    print(json.dumps({
        "text": out.choices[0].message.content,
        "metrics": recorder.metrics.snapshot(),
        "api": api.__file__, "schemas": schemas.__file__,
        "evidence_client": evidence_client.__file__,
        "library": evidence_client.recorder.LIBRARY,
    }))
""")


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("EVIDENCE_", "PYTHON", "VIRTUAL_ENV", "PIP_REQUIRE"))}
    env.update(extra)
    return env


def _run(cmd: list[str], timeout: float, **kw) -> subprocess.CompletedProcess:
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    shown = " ".join(a if len(a) < 80 else a[:40].strip() + " ..." for a in map(str, cmd))
    print(f"$ {shown}  [{time.monotonic() - t0:.1f}s, rc={p.returncode}]")
    assert p.returncode == 0, f"{cmd} failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


def test_client_wheel_installs_alone_and_records_into_the_log(
        tmp_path, kafka_bootstrap, make_topics, run_writer, fake_provider):
    topics = make_topics(partitions=1)
    writer = run_writer(topics)

    # 1. Build both wheels from this checkout.
    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels),
          "packaging/contract", "packaging/client"], 120, cwd=ROOT, env=_clean_env())
    built = sorted(p.name for p in wheels.glob("*.whl"))
    assert [n.split("-")[0] for n in built] == ["evidence_store_client",
                                                "evidence_store_contract"], built

    # 2. A fresh venv (no system site-packages, not even pip: this venv's pip installs into
    #    it with --python) with the client and the openai SDK only.
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], 60, env=_clean_env())
    py = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(py), "--disable-pip-version-check"]
    _run([*pip, "install", "-q", "--find-links", str(wheels), "evidence-store-client==0.2.0",
          "openai"], 180, cwd=tmp_path, env=_clean_env())
    pip_list = _run([*pip, "list"], 60, cwd=tmp_path, env=_clean_env()).stdout
    print("pip list of the fresh venv:\n" + pip_list)

    inspect = json.loads(_run([str(py), "-I", "-c", INSPECT,
                               json.dumps([SERVER_PACKAGES, SERVER_DISTRIBUTIONS])], 60,
                              cwd=tmp_path, env=_clean_env()).stdout)
    print("evidence-store-client Requires-Dist:")
    for r in inspect["client_requires"]:
        print(f"  {r}")
    print("evidence-store-contract Requires-Dist:")
    for r in inspect["contract_requires"]:
        print(f"  {r}")
    print("top-level modules in site-packages: " + " ".join(inspect["top_level"]))

    site = str(venv / "lib")
    assert all(str(ROOT) not in p for p in inspect["sys_path"]), inspect["sys_path"]
    assert inspect["found_server_packages"] == [], inspect
    assert inspect["found_server_dists"] == [], inspect
    assert not set(SERVER_PACKAGES) & set(inspect["top_level"]), inspect["top_level"]
    assert {"evidence-store-client", "evidence-store-contract", "openai"} <= set(inspect["dists"])
    requires = {r.split(";")[0].strip() for r in inspect["client_requires"]}
    assert "evidence-store-contract[tlog]==0.2.0" in requires, requires
    # The installed client is this checkout's evidence_client/, not something from an index.
    assert inspect["client_file"].startswith(site), inspect["client_file"]
    client_wheel = next(wheels.glob("evidence_store_client-*.whl"))
    with zipfile.ZipFile(client_wheel) as z:
        built_recorder = z.read("evidence_client/recorder.py")
    assert Path(inspect["recorder_file"]).read_bytes() == built_recorder, "not the built wheel"

    # The contract's schema files ship in its wheel: a record of every contract version ever
    # sealed (tests/golden/) decodes there, with the schemas of avro/history/.
    golden = {p.stem.removeprefix("contract-"): json.loads(p.read_text())["records"][0]["value"]
              for p in sorted((ROOT / "tests" / "golden").glob("contract-*.json"))}
    decoded = json.loads(_run([str(py), "-I", "-c", DECODE, json.dumps(list(golden.values()))],
                              60, cwd=tmp_path, env=_clean_env()).stdout)
    assert decoded["schemas_dir"].startswith(site), decoded
    assert decoded["versions"] == list(golden) and "1.0" in golden, decoded

    # 3. The application, with its own `api` and `schemas` packages.
    app = tmp_path / "app"
    for pkg in ("api", "schemas"):
        (app / pkg).mkdir(parents=True)
        (app / pkg / "__init__.py").write_text(f'WHO = "the app\'s own {pkg}"\n')
    (app / "main.py").write_text(APP)
    marker = f"wheel-app {uuid.uuid4()}"
    stream = f"wheel:{uuid.uuid4().hex[:8]}"
    spool = tmp_path / "spool"
    p = _run([str(py), "main.py"], 60, cwd=app, env=_clean_env(
        APP_KAFKA=kafka_bootstrap, APP_STREAM=stream, APP_PREFIX=topics.names.prefix,
        APP_SPOOL=str(spool), APP_PROVIDER=fake_provider.url, APP_MARKER=marker))
    result = json.loads(p.stdout.strip().splitlines()[-1])
    print("app:", json.dumps(result, indent=1))
    assert result["text"].startswith(f"echo: {marker}"), result
    assert result["evidence_client"].startswith(site), result
    assert result["library"] == "evidence-store-client/0.2.0", result
    m = result["metrics"]
    assert (m["captured"], m["delivered"], m["failed"], m["errors"], m["pending"]) == \
        (1, 1, 0, 0, 0), m

    # The provider saw exactly one request with the marker: its bytes define the content key.
    seen = [s for s in fake_provider.wait_for(1) if marker.encode() in s.request_body]
    assert len(seen) == 1, seen
    key = hashlib.sha256(b"\x00" + seen[0].request_body).digest()
    assert key == schemas.content_key(seen[0].request_body)

    # 4. The real writer sealed it on the log exactly once.
    wait_for_count(kafka_bootstrap, topics.names.log, 1, 45, writer.assert_alive)
    writer.wait_consumed(topics.names.intake)  # a duplicate on intake would be sealed by now
    log = read_all(kafka_bootstrap, topics.names.log)
    records = [schemas.split_record(msg.value())[1] for msg in log]
    mine = [r for r in records if r["body"]["content_key"] == key]
    assert len(log) == 1 and len(mine) == 1, [r["body"]["event_id"] for r in records]
    rec = mine[0]
    assert rec["body"]["stream"] == stream and rec["seal"]["seq"] == 1
    assert rec["body"]["request_bytes"] == seen[0].request_body
    assert rec["body"]["response_bytes"] == seen[0].response_body
    assert rec["body"]["capture"]["library"] == "evidence-store-client/0.2.0"
    assert read_all(kafka_bootstrap, topics.names.rejected) == []
    assert not spool.exists() or not any(spool.iterdir()), list(spool.rglob("*"))
    print(f"sealed once: stream={stream} seq=1 content_key={key.hex()} "
          f"event_id={rec['body']['event_id']}")


def test_no_wheel_ships_the_local_stack_and_the_contract_ships_its_schema_files(tmp_path):
    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels),
          ".", "packaging/contract", "packaging/client"], 180, cwd=ROOT, env=_clean_env())
    files = {w.name.split("-")[0]: zipfile.ZipFile(w).namelist() for w in wheels.glob("*.whl")}
    assert sorted(files) == ["evidence_store", "evidence_store_client",
                             "evidence_store_contract"], sorted(files)
    for wheel, names in files.items():
        top = {n.split("/")[0] for n in names}
        print(f"{wheel}: {' '.join(sorted(top))}")
        assert not top & set(CHECKOUT_ONLY), (wheel, sorted(top & set(CHECKOUT_ONLY)))
        assert not [n for n in names if n.endswith(("pom.xml", ".properties"))], wheel
    assert {n.split("/")[0] for n in files["evidence_store_contract"]
            if ".dist-info/" not in n} == {"evidence_contract"}

    # Every file of schemas/ (the .avsc of every contract version, the JSON Schema, the
    # vectors) is in the contract's wheel, byte for byte, where evidence_contract.files finds it.
    tracked = subprocess.run(["git", "ls-files", "schemas"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    assert any(t.startswith("schemas/avro/history/") for t in tracked), tracked
    with zipfile.ZipFile(next(wheels.glob("evidence_store_contract-*.whl"))) as z:
        for rel in tracked:
            assert z.read(f"evidence_contract/{rel}") == (ROOT / rel).read_bytes(), rel
