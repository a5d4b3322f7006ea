"""Screenshots of the main pages, for docs/screenshots/: ``python -m tools.screenshots``.

Run after ``make up`` (whose demo records a few calls): it logs in to the pages of the API in
``.stack/env`` with its key, in Debian's headless Chromium (:mod:`tools.browser`), and writes
``streams``, ``record``, ``verify``, ``audit`` and ``fidelity``, each ``-light.png`` and
``-dark.png`` (the pages follow the browser's colour scheme). The record shown is the first of
the first stream the key may read; the verify page shows a replay that does not match, with
its reason; the audit page is taken once the audit has ended.

    python -m tools.screenshots [--url URL] [--key KEY] [--out DIR] [--stream STREAM]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tools.browser import ROOT, launch

__all__ = ["PAGES", "main", "take"]

PAGES = ("streams", "record", "verify", "audit", "fidelity")
SCHEMES = ("light", "dark")
VIEWPORT = {"width": 1280, "height": 900}


def _stack_env() -> dict[str, str]:
    env: dict[str, str] = {}
    path = ROOT / ".stack" / "env"
    if path.exists():
        for line in path.read_text().splitlines():
            name, sep, value = line.removeprefix("export ").partition("=")
            if sep and not line.startswith("#"):
                env[name.strip()] = value.strip()
    return env


def _first_record(url: str, key: str, stream: str | None) -> tuple[str, int]:
    import httpx

    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"},
                      timeout=10) as api:
        if stream is None:
            streams = api.get("/streams").raise_for_status().json()["streams"]
            if not streams:
                raise SystemExit("no stream to show: run `make up` (its demo records calls)")
            stream = streams[0]["stream"]
        records = api.get(f"/streams/{stream}/records",
                          params={"limit": 1}).raise_for_status().json()["records"]
        if not records:
            raise SystemExit(f"stream {stream} has no record to show")
        return stream, records[0]["seq"]


def _shoot(page: Any, out: Path, name: str, scheme: str) -> Path:
    path = out / f"{name}-{scheme}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def take(browser: Any, url: str, key: str, out: Path, stream: str | None = None) -> list[Path]:
    """Log in to the pages at ``url`` with ``key`` in ``browser`` (a Playwright ``Browser``,
    :func:`tools.browser.launch`) and write the screenshots into ``out``; their paths."""
    stream, seq = _first_record(url, key, stream)
    record = f"/ui/streams/{stream}/records/{seq}"
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for scheme in SCHEMES:
        context = browser.new_context(color_scheme=scheme, viewport=VIEWPORT)
        try:
            context.set_default_timeout(30_000)
            page = context.new_page()
            page.goto(url + "/ui/login")
            page.fill("#key", key)
            page.click("main form button[type=submit]")
            page.wait_for_url(url + "/ui/")
            written.append(_shoot(page, out, "streams", scheme))

            page.goto(url + record)
            written.append(_shoot(page, out, "record", scheme))

            page.goto(url + f"/ui/verify?stream={quote(stream)}&seq={seq}")
            page.fill("#output", "a replayed output that differs")
            page.click("main form button[type=submit]")
            page.wait_for_selector("#verdict")
            written.append(_shoot(page, out, "verify", scheme))

            page.goto(url + f"/ui/audit?stream={quote(stream)}")
            page.click("main form button[type=submit]")
            page.wait_for_selector("#verdict, #audit-error", timeout=120_000)
            written.append(_shoot(page, out, "audit", scheme))

            page.goto(url + f"/ui/fidelity?stream={quote(stream)}&seq={seq}")
            written.append(_shoot(page, out, "fidelity", scheme))
        finally:
            context.close()
    return written


def main(argv: list[str] | None = None) -> int:
    env = {**_stack_env(), **os.environ}
    parser = argparse.ArgumentParser(prog="python -m tools.screenshots",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=env.get("EVIDENCE_API_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--key", default=env.get("EVIDENCE_API_KEY"),
                        help="an API key (default: EVIDENCE_API_KEY, from .stack/env)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--stream", help="the stream to show (default: the first)")
    args = parser.parse_args(argv)
    if not args.key:
        parser.error("no API key: run `make up`, or give --key")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = launch(pw)
        try:
            written = take(browser, args.url.rstrip("/"), args.key, args.out, args.stream)
        finally:
            browser.close()
    for path in written:
        print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
