"""Property-based fuzzing of the API from its own OpenAPI document (schemathesis).

A real API instance (served as ``evidence api`` serves it) over a real PostgreSQL read model,
called with a valid key: every operation gets schema-conforming cases (positive: they must
reach the handler and be answered as documented) and schema-violating ones (negative: they
must be refused with a 4xx). Whatever is sent, the API must answer

- no 5xx (``not_a_server_error``),
- a body that matches the documented schema of its status (``response_schema_conformance``),
- a documented status code and content type (``status_code_conformance``,
  ``content_type_conformance``).

Bounded for CI: ``EXAMPLES`` (40) cases per operation and mode, about 800 requests and 120
generated manifests. The suite is bound by CPU on two cores, and hypothesis's generation made
these the most CPU-hungry tests in it (over 300 s of test time at 75 cases).
``EVIDENCE_FUZZ_EXAMPLES=200`` gives a deeper run. The read model holds records in the streams the generator tries first ("0", "a",
"A": the shortest ids the stream pattern allows), so the 200 paths of the record routes are
fuzzed too, not only their 404s; so are the verifiable log's routes: each stream has signed
checkpoints of sizes 1 to 3 and the API a log key and a witness key (its POST gets cosigned
notes that fail one check or another: every answer a 4xx).
"""

import hashlib
import json
import os
import time
from collections import Counter

import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable

from api import Keyring, Settings
from evidence_contract.note import SIG_COSIGNATURE_V1, SIG_ED25519, SignerKey
from tests.fixtures.api_server import serve_api
from tests.fixtures.readmodel import ReadModel

pytestmark = pytest.mark.integration

KEY = "fuzz-key-0123456789abcdef0123456789abcdef"
EXAMPLES = int(os.environ.get("EVIDENCE_FUZZ_EXAMPLES") or 40)
STREAMS = ("0", "a", "A")


LOG = SignerKey("evidence-store.local/log", SIG_ED25519, hashlib.sha256(b"fuzz log").digest())
WITNESS = SignerKey("witness.fuzz/w", SIG_COSIGNATURE_V1, hashlib.sha256(b"fuzz w").digest())


@pytest.fixture(scope="module")
def api_url(database_url):
    with ReadModel(database_url) as rm:
        for stream in STREAMS:
            for i in range(3):
                rm.add(stream, output=f"out {i}", seed=None if i else 2**64 + 1)
                rm.add_checkpoint(stream, LOG)
        settings = Settings(database_url, Keyring([("fuzz", KEY, ["*"])]),
                            views_schema=rm.views, max_lag=10**9, log_key=LOG.verifier,
                            max_wait_ms=50,  # the long poll is fuzzed too, briefly
                            witness_keys=(WITNESS.verifier,))
        with serve_api(settings) as url:
            yield url


AUTH = {"Authorization": f"Bearer {KEY}"}


def bounded(examples: int):
    """Hypothesis settings for one operation: no shrinking, no example database, the same
    cases on every run (CI must not flake on a new random seed)."""
    return settings(max_examples=examples, deadline=None, database=None, derandomize=True,
                    phases=[Phase.explicit, Phase.generate],
                    suppress_health_check=list(HealthCheck))


class Fuzzer:
    """Calls cases on the API and applies the checks; collects statuses and failures."""

    def __init__(self, api_url: str) -> None:
        from schemathesis.checks import not_a_server_error
        from schemathesis.specs.openapi.checks import (
            content_type_conformance, response_schema_conformance, status_code_conformance,
        )

        self.api_url = api_url
        self.checks = [not_a_server_error, response_schema_conformance,
                       status_code_conformance, content_type_conformance]
        self.ran: Counter = Counter()
        self.statuses: Counter = Counter()
        self.failures: list[str] = []

    def __call__(self, case, label: str) -> None:
        self.ran[label] += 1
        response = case.call(base_url=self.api_url, headers=AUTH, timeout=30)
        self.statuses[response.status_code] += 1
        try:
            case.validate_response(response, checks=self.checks, headers=AUTH)
        except Exception as e:  # noqa: BLE001 - collected, reported together by the test
            if len(self.failures) < 20:
                self.failures.append(f"{label} -> {response.status_code}: {str(e)[:600]}\n  "
                                     f"{case.as_curl_command(headers=AUTH)[:800]}")


@pytest.mark.parametrize("mode_name", ["positive", "negative"])
def test_fuzz_every_operation_from_the_openapi_document(api_url, mode_name):
    """One generation mode a test, so the two halves run side by side on parallel workers
    (each is the same cases as before: hypothesis is derandomized per operation and mode)."""
    import schemathesis  # here, not at collection: a worker that never fuzzes never imports it
    from schemathesis import GenerationMode

    mode = GenerationMode(mode_name)
    schema = schemathesis.openapi.from_url(f"{api_url}/openapi.json")
    fuzz = Fuzzer(api_url)
    no_negative: list[str] = []
    labels = []
    started = time.monotonic()

    for result in schema.get_all_operations():
        operation = result.ok()
        labels.append(operation.label)

        @given(case=operation.as_strategy(generation_mode=mode, headers=AUTH))
        @bounded(EXAMPLES)
        def run(case):
            fuzz(case, f"{operation.label} [{mode.value}]")

        try:
            run()
        except Unsatisfiable:
            # Nothing to violate: an operation without parameters or body has no
            # negative cases (/healthz, /readyz, /metrics).
            assert mode == GenerationMode.NEGATIVE, operation.label
            no_negative.append(operation.label)

    elapsed = time.monotonic() - started
    operations = {label.rsplit(" [", 1)[0] for label in fuzz.ran}
    print(f"\nfuzzed {sum(fuzz.ran.values())} {mode.value} cases over {len(operations)} "
          f"operations in {elapsed:.1f} s; statuses {dict(sorted(fuzz.statuses.items()))}; "
          f"no negative cases for {no_negative}")
    # every operation the document has was fuzzed (POST /admin/erasures too: 403, not admin)
    assert operations == set(labels) - set(no_negative), sorted(set(labels) - operations)
    assert not fuzz.failures, "\n".join(fuzz.failures)
    assert not [s for s in fuzz.statuses if s >= 500]
    if mode == GenerationMode.POSITIVE:
        # The valid cases reached the handlers: record routes answered 200 as well as 404.
        assert fuzz.statuses[200] > 0 and fuzz.statuses[404] > 0
    else:
        assert fuzz.statuses[422] > 0


def _with_manifest_schema(doc: dict) -> dict:
    """The OpenAPI document with POST /fidelity/analyze's body spelled out as the manifest's
    JSON Schema (the API documents it as an object with a pointer to that schema), its
    $defs moved to components, so the fuzzer sends manifests that pass validation and reach
    the analyzer and its RFC 8785 digest."""
    from fidelity.manifest import json_schema

    manifest = json.loads(json.dumps(json_schema()))
    defs = manifest.pop("$defs", {})
    for key in ("$schema", "$id"):
        manifest.pop(key, None)

    def rewrite(node):
        if isinstance(node, dict):
            return {k: ("#/components/schemas/Manifest_" + v.rsplit("/", 1)[1]
                        if k == "$ref" and v.startswith("#/$defs/") else rewrite(v))
                    for k, v in node.items()}
        if isinstance(node, list):
            return [rewrite(v) for v in node]
        return node

    for name, schema in defs.items():
        doc["components"]["schemas"][f"Manifest_{name}"] = rewrite(schema)
    body = doc["paths"]["/fidelity/analyze"]["post"]["requestBody"]
    body["content"]["application/json"]["schema"] = rewrite(manifest)
    return doc


def test_fuzz_the_analyzer_with_valid_manifests(api_url):
    import schemathesis
    from schemathesis import GenerationMode

    doc = _with_manifest_schema(httpx.get(f"{api_url}/openapi.json").json())
    schema = schemathesis.openapi.from_dict(doc)
    operation = schema["/fidelity/analyze"]["POST"]
    fuzz = Fuzzer(api_url)

    @given(case=operation.as_strategy(generation_mode=GenerationMode.POSITIVE, headers=AUTH))
    @bounded(EXAMPLES * 3)
    def run(case):
        fuzz(case, "POST /fidelity/analyze [valid manifest]")

    run()
    print(f"\nanalyzed {sum(fuzz.ran.values())} generated manifests: {dict(fuzz.statuses)}")
    assert not fuzz.failures, "\n".join(fuzz.failures)
    assert fuzz.statuses[200] > 0  # valid manifests were analyzed, not only refused


def test_the_fuzzed_server_still_answers(api_url):
    with httpx.Client(base_url=api_url, headers={"Authorization": f"Bearer {KEY}"}) as c:
        assert c.get("/streams/a/records/1").status_code == 200
        assert c.get("/readyz").status_code == 200
        assert c.get("/streams/a/proof/inclusion?seq=2").status_code == 200
