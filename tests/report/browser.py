"""Headless Chromium for the report tests (Debian's chromium + chromium-driver)."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


def chromium_missing_reason() -> str | None:
    """Why the browser test cannot run here, or None if it can."""
    if not (CHROMIUM.exists() or shutil.which("chromium")):
        return "chromium is not installed (apt-get install chromium chromium-driver)"
    if not (CHROMEDRIVER.exists() or shutil.which("chromedriver")):
        return "chromedriver is not installed (apt-get install chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    return None


@contextlib.contextmanager
def headless_chromium(width: int = 1366, height: int = 900) -> Iterator[object]:
    """A selenium Chrome driver on a fresh profile that records the browser console."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="report-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM if CHROMIUM.exists() else shutil.which("chromium"))
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        "--disable-sync",
        f"--user-data-dir={profile}",
        f"--window-size={width},{height}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver_path = CHROMEDRIVER if CHROMEDRIVER.exists() else shutil.which("chromedriver")
    driver = webdriver.Chrome(service=Service(str(driver_path)), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def browser_marks() -> list[object]:
    """The marks of a browser test: ``browser``, and skipped where Chromium cannot run."""
    import pytest

    reason = chromium_missing_reason()
    return [pytest.mark.browser, pytest.mark.skipif(reason is not None, reason=str(reason))]
