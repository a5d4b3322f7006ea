"""Every code block a reader may copy from the README and docs/ is checked against the code
(tools.docs_blocks says how, per language), and so are the commands, names and links in their
prose."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tools import docs_blocks as d

BLOCKS = [b for path in d.DOCS for b in d.blocks(path)]


def test_the_readme_is_short():
    lines = (d.ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < 200


@pytest.mark.parametrize("block", BLOCKS, ids=[b.where for b in BLOCKS])
def test_code_block(block):
    assert d.check_block(block) == []


@pytest.mark.parametrize("path", d.DOCS, ids=[p.name for p in d.DOCS])
def test_inline_commands_and_names(path):
    assert d.check_inline(path) == []


@pytest.mark.parametrize("path", d.DOCS, ids=[p.name for p in d.DOCS])
def test_links(path):
    assert d.check_links(path) == []


def test_every_document_is_in_the_index():
    index = (d.ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([\w-]+\.md)", index))
    assert {p.name for p in d.DOCS if p.parent.name == "docs" and p.name != "README.md"} \
        <= linked


def test_every_route_is_in_the_rest_reference():
    from fastapi.routing import APIRoute

    from api.app import create_app
    from api.config import Settings
    from api.auth import Keyring

    app = create_app(Settings("postgresql://unused", Keyring([("k", "x" * 40, ["*"])])))
    text = re.sub(r"\{[^}]*\}", "{}", (d.ROOT / "docs" / "api.md").read_text(encoding="utf-8"))
    documented = set(re.findall(r"(/[\w{}/.-]*)", text))
    routes = {re.sub(r"\{[^}]*\}", "{}", r.path) for r in app.routes if isinstance(r, APIRoute)
              and not r.path.startswith(("/docs", "/openapi", "/redoc"))}
    missing = sorted(r for r in routes
                     if r not in documented and r.replace("/{}", "/...") not in text)
    assert missing == []


def test_every_subcommand_is_in_the_cli_reference():
    text = (d.ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    missing = [name for name in d._subparsers(d.evidence_parser())
               if f"`evidence {name}" not in text and f", `evidence {name}`" not in text]
    assert missing == []


# The checks themselves: each must be able to fail.

def test_an_unknown_flag_or_subcommand_is_found():
    assert d.evidence_problems("evidence retention run --once") == []
    assert d.evidence_problems("evidence replay --stream S --seq N --output T") == []
    assert d.evidence_problems("evidence retention run --forever") == [
        "`evidence retention run` has no flag --forever"]
    assert d.evidence_problems("evidence retention purge")[0].startswith(
        "`evidence retention` has no subcommand 'purge'")
    assert d.evidence_problems("evidence dev up|down --clean") == []
    assert d.evidence_problems("evidence dev up|down --nope") != []


def test_a_shell_block_checks_make_python_and_programs():
    assert d.check_shell("make up NO_DEMO=1\nsource .stack/env && evidence audit") == []
    assert d.check_shell("make upp") == ["no make target 'upp'"]
    assert d.check_shell("python -m no_such_module_here") == [
        "python -m no_such_module_here: no such module"]
    assert d.check_shell("frobnicate --all")[0].startswith("unknown program 'frobnicate'")
    assert d.check_shell("evidence erase \\\n  --subject x --wat") == [
        "`evidence erase` has no flag --wat"]


def test_a_python_block_binds_its_calls():
    good = ("import os\nfrom evidence_client import Replayer\n"
            "r = Replayer(os.environ['U'], 'k', log_key='f')\nr.http_client()\n")
    assert d.check_python(good) == []
    bad = "from evidence_client import Replayer\nstore = None\nr = Replayer(key_store=store)\n"
    [problem] = d.check_python(bad)
    assert "Replayer(...) does not match" in problem and "api_url" in problem
    assert d.check_python("from evidence_client import Replayer\nr = Replayer('u', 'k')\n"
                          "r.no_such_method()\n") == [
        "Replayer.no_such_method (on r) does not exist"]
    assert d.check_python("from evidence_client import NoSuchName\n") == [
        "evidence_client has no 'NoSuchName'"]


def test_a_pure_python_block_runs():
    assert d.runnable("from evidence_contract import content_key\nimport hashlib\n")
    assert not d.runnable("import openai\n")
    assert d.run_python("raise ValueError('no')") == ["raised ValueError: no"]


def test_an_unlabelled_block_and_a_broken_link_are_found(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("# Title\n\n```\nplain\n```\n\n[a](missing.md) [b](x.md#title) "
                   "[c](x.md#nope)\n")
    [block] = list(d.blocks(doc))
    assert d.check_block(block)[0].startswith("a code block must say its language")
    assert d.check_links(doc) == ["link to missing.md: no such file",
                                  "link to x.md#nope: x.md has no heading #nope"]


LAB_NOTEBOOK = re.compile(
    r"(?<![-\w])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![-\w])"   # a commit hash
    r"|(?i:\bthis session\b|\bissue \d+|\bthe machine before\b)")


@pytest.mark.parametrize("path", d.DOCS, ids=[p.name for p in d.DOCS])
def test_no_lab_notebook(path):
    """History (commits, sessions, issues) belongs in bench/results/ and the git log."""
    text = path.read_text(encoding="utf-8")
    assert [m.group(0) for m in LAB_NOTEBOOK.finditer(text)] == []


def test_the_lab_notebook_pattern_finds_what_it_should():
    assert LAB_NOTEBOOK.findall("at 1058b5c, in this session, since issue 14") == [
        "1058b5c", "this session", "issue 14"]
    assert LAB_NOTEBOOK.findall("--event-id 01890f5e-5b5c-7cc0, 1048576 bytes, Ed25519") == []


def test_no_code_cites_a_style_guide_the_repository_does_not_have():
    assert not (d.ROOT / "STYLE.md").exists()
    # The tracked sources only: walking the checkout would enter .stack/, where a running
    # broker removes directories under the walk.
    import subprocess

    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=d.ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    citing = [name for name in tracked if (d.ROOT / name) != Path(__file__)
              and (d.ROOT / name).exists()
              and "STYLE.md" in (d.ROOT / name).read_text(encoding="utf-8", errors="replace")]
    assert citing == []
