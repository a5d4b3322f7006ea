# The browser fixtures (Debian's headless Chromium, Playwright, axe-core) for these tests only;
# tests/fixtures/browser.py says how they are installed and started.
from tests.fixtures.browser import browser, make_tab  # noqa: F401
