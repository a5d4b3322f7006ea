"""The configuration reference (docs/configuration.md) is what the code reads, and its scanner
finds a variable whatever shape the reading takes."""

from __future__ import annotations

import textwrap

import pytest

from tools import config_reference as ref


def reads(source: str) -> dict[str, list[str | None]]:
    out: dict[str, list[str | None]] = {}
    for name, read in ref.scan_source(textwrap.dedent(source), "m"):
        out.setdefault(name, []).append(read.default)
    return out


def test_the_checked_in_reference_is_current_and_complete():
    assert ref.check() == [], "\n".join(ref.check())


def test_every_variable_the_code_reads_has_a_description():
    described = ref.load_descriptions()
    missing = sorted(set(ref.variables()) - set(described))
    assert missing == [], f"describe these in docs/configuration.toml: {missing}"


def test_the_reference_names_every_variable_the_code_reads():
    text = ref.OUTPUT.read_text(encoding="utf-8")
    assert [n for n in ref.variables() if f"| `{n}` |" not in text] == []


def test_the_scan_sees_the_services_settings():
    found = ref.scan()
    assert found["EVIDENCE_MAX_MESSAGE_BYTES"].defaults == {str(64 << 20): ["topics.spec"]}
    assert "writer.config" in found["EVIDENCE_WRITER_BATCH_LINGER_MS"].modules
    assert found["EVIDENCE_WRITER_BATCH_LINGER_MS"].defaults == {"20": ["writer.config"]}
    assert all(m.startswith("evidence_client.") for m in found["EVIDENCE_SPOOL_DIR"].modules)


def test_a_folder_is_shown_by_its_import_name(tmp_path):
    (tmp_path / "schemas").mkdir()
    renamed = {(tmp_path / "schemas").resolve(): "evidence_contract"}
    assert ref.module_name(tmp_path / "schemas" / "tlog.py", tmp_path, renamed) == \
        "evidence_contract.tlog"
    assert ref.module_name(tmp_path / "schemas" / "__init__.py", tmp_path, renamed) == \
        "evidence_contract"
    assert ref.module_name(tmp_path / "writer" / "config.py", tmp_path, renamed) == \
        "writer.config"
    # the mapping comes from the distributions' package-dir
    assert "evidence_contract" in ref.import_names().values()


def test_a_default_after_the_name_in_any_call():
    assert reads("""
        import os
        a = os.environ.get("EVIDENCE_A", "6")
        b = _int(env, "EVIDENCE_B", 1 << 20)
        c = os.getenv("EVIDENCE_C")
        d = read(env, "EVIDENCE_D", default=2.5)
    """) == {"EVIDENCE_A": ["6"], "EVIDENCE_B": [str(1 << 20)], "EVIDENCE_C": [None],
             "EVIDENCE_D": ["2.5"]}


def test_a_default_after_or_and_a_fallback_variable():
    assert reads("""
        a = env.get("EVIDENCE_A", "") or "evidence"
        b = flag or env.get("EVIDENCE_B") or env.get("EVIDENCE_C")
        d = env.get("EVIDENCE_D") or saved.get("EVIDENCE_D") or "x"
    """) == {"EVIDENCE_A": ["evidence"], "EVIDENCE_B": ["$EVIDENCE_C"], "EVIDENCE_C": [None],
             "EVIDENCE_D": ["x", "x"]}


def test_a_default_through_a_module_constant_and_a_computed_one():
    assert reads("""
        DAY = 24 * 3600
        ENV = "EVIDENCE_NATIVE"
        a = env.get("EVIDENCE_A", str(7 * DAY))
        b = env.get(ENV, "auto")
        c = _int(env, "EVIDENCE_C", default_workers())
        d = _read_text("EVIDENCE_D", path)
    """) == {"EVIDENCE_A": [str(7 * 24 * 3600)], "EVIDENCE_NATIVE": [None, "auto"],
             "EVIDENCE_C": ["default_workers()"], "EVIDENCE_D": [None]}


def test_a_table_of_names_takes_the_field_default_of_its_class():
    assert reads("""
        from dataclasses import dataclass, field
        @dataclass
        class Config:
            linger_ms: int = 20
            ident: str = field(default_factory=lambda: host())
            key_file: str | None = None
        _ENV = {"linger_ms": ("EVIDENCE_LINGER_MS", int),
                "ident": ("EVIDENCE_IDENT", str),
                "key_file": ("EVIDENCE_KEY_FILE", str)}
    """) == {"EVIDENCE_LINGER_MS": ["20"], "EVIDENCE_IDENT": ["host()"],
             "EVIDENCE_KEY_FILE": [None]}


def test_pydantic_settings_fields_under_an_env_prefix():
    assert reads("""
        class ApiSettings(BaseSettings):
            model_config = SettingsConfigDict(env_prefix="EVIDENCE_API_")
            max_lag: int = 10_000
            pool_max: int = Field(default=10)
            database_url: str
    """) == {"EVIDENCE_API_MAX_LAG": ["10000"], "EVIDENCE_API_POOL_MAX": ["10"],
             "EVIDENCE_API_DATABASE_URL": [None]}


def test_mentions_in_docstrings_and_messages_are_not_reads():
    assert reads('''
        """Reads EVIDENCE_DOC only in prose:

            EVIDENCE_DOC2
        """
        X = 1
        """EVIDENCE_ATTR_DOC"""
        def f():
            """EVIDENCE_FN_DOC"""
            raise ValueError(f"EVIDENCE_MSG {x}: bad")
        help = "default: $EVIDENCE_HELP"
        prefix = "EVIDENCE_"
    ''') == {}


def test_a_variable_without_a_description_fails_the_generation():
    found = {"EVIDENCE_NEW": ref.Variable("EVIDENCE_NEW", [ref.Read("writer.config", 1, None)])}
    with pytest.raises(ref.ReferenceError, match="EVIDENCE_NEW is read by writer.config"):
        ref.generate(found, {})


def test_a_description_of_nothing_and_a_contradicted_default_fail():
    found = {"EVIDENCE_A": ref.Variable("EVIDENCE_A", [ref.Read("m", 1, "5")])}
    described = {"EVIDENCE_A": {"description": "a", "default": "6"},
                 "EVIDENCE_GONE": {"description": "gone"}}
    with pytest.raises(ref.ReferenceError) as e:
        ref.generate(found, described)
    assert "EVIDENCE_GONE is described" in str(e.value)
    assert "EVIDENCE_A: the code states its default (5)" in str(e.value)


def test_variables_set_for_child_processes_are_a_section_of_their_own():
    found = {"EVIDENCE_A": ref.Variable("EVIDENCE_A", [ref.Read("api.config", 1, "5")]),
             "EVIDENCE_SEQ": ref.Variable("EVIDENCE_SEQ", [ref.Read("cli.harness", 2, None)])}
    text = ref.generate(found, {"EVIDENCE_A": {"description": "the a"},
                                "EVIDENCE_SEQ": {"description": "the seq", "set": True}})
    reads_part, set_part = text.split("## Variables evidence sets")
    assert "| `EVIDENCE_A` | `5` | API: `api.config` | the a |" in reads_part
    assert "EVIDENCE_SEQ" not in reads_part and "| `EVIDENCE_SEQ` |" in set_part
