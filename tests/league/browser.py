"""A real headless Chromium (Debian's `chromium` and `chromium-driver`) driven by Selenium, for the dashboard tests."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import IN_CI

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=1440,1000", "--hide-scrollbars")


def chromium_paths() -> tuple[str, str]:
    """(chromium, chromedriver); skipped locally when missing, failed under CI=true (make install installs them)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    try:
        import selenium  # noqa: F401
    except ImportError:
        browser = None
    if not (browser and driver):
        msg = "the browser tests need Debian's chromium and chromium-driver, and selenium (make install)"
        if IN_CI:
            pytest.fail(msg + " (CI=true: they fail rather than skip)")
        pytest.skip(msg)
    return browser, driver


class Browser:
    """One Chromium with a fresh profile; `console_errors()` returns (and clears) what its console reported."""

    def __init__(self):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        browser, driver = chromium_paths()
        self.profile = tempfile.mkdtemp(prefix="populora-chromium-")
        options = webdriver.ChromeOptions()
        options.binary_location = browser
        for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={self.profile}"):
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.driver = webdriver.Chrome(service=Service(executable_path=driver), options=options)
        self.driver.set_page_load_timeout(60)

    def open(self, url: str) -> None:
        self.driver.get(url)

    def js(self, script: str, *args):
        return self.driver.execute_script(script, *args)

    def select(self, css: str, value: str) -> None:
        """Choose `value` in the <select> at `css`, as a user would; retried while the page re-renders it (an
        element found just before a refresh replaced it is stale)."""
        from selenium.webdriver.support.ui import Select

        self.wait(lambda: Select(self.driver.find_element("css selector", css)).select_by_value(value) or True,
                  what=f"{css} to take {value!r}")

    def click(self, css: str) -> None:
        """Click the element at `css`; retried while the page re-renders it."""
        self.wait(lambda: self.driver.find_element("css selector", css).click() or True, what=f"a click on {css}")

    def wait(self, condition: Callable[[], object], timeout: float = 30.0, what: str = "condition",
             describe: Callable[[], object] | None = None) -> object:
        """Poll `condition` until it returns something truthy; its last exception or value in the failure."""
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            try:
                got = condition()
                if got:
                    return got
                last = got
            except Exception as e:  # the element is not there yet
                last = e
            time.sleep(0.1)
        seen = ""
        if describe is not None:  # what the page showed when it gave up, to tell a slow page from a wrong one
            try:
                seen = f"; the page: {describe()!r}"
            except Exception as e:
                seen = f"; the page could not be read: {e!r}"
        raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r}){seen}")

    def texts(self, css: str) -> list[str]:
        return self.js("return Array.from(document.querySelectorAll(arguments[0])).map(e => e.textContent)", css)

    def console_errors(self) -> list[str]:
        return [e["message"] for e in self.driver.get_log("browser") if e["level"] == "SEVERE"]

    def screenshot(self, path: Path) -> None:
        """A PNG of the whole page (the window grown to its height, at most 2,600 px), reduced to a 256-colour
        palette to stay small."""
        from PIL import Image

        for _ in range(4):
            need, have = self.js("return [document.documentElement.scrollHeight, window.innerHeight]")
            if have >= need:
                break
            height = self.driver.get_window_size()["height"]
            self.driver.set_window_size(1440, min(2600, height + need - have))
            time.sleep(0.3)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.driver.save_screenshot(str(path))
        Image.open(path).convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
        self.driver.set_window_size(1440, 1000)

    def close(self) -> None:
        self.driver.quit()
        shutil.rmtree(self.profile, ignore_errors=True)
