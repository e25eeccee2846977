"""Headless Chromium driven by selenium: the browser test of the site and `rlspec site --screenshot`.

Debian's `chromium` and `chromium-driver` packages (`/usr/bin/chromium`, `/usr/bin/chromedriver`;
`.ci/run` installs them) and the `selenium` package (`pip install -e ".[browser]"`). Chromium starts
with a fresh profile and with every background network feature off: the pages it opens must need
nothing from the network.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")


def missing() -> str | None:
    """Why a browser cannot be started here (None when it can)."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return 'selenium is not installed (pip install -e ".[browser]")'
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not Path(path).exists():
            return f"{path} not found (apt-get install -y {package})"
    return None


@contextmanager
def chromium(width: int = 1400, height: int = 1000) -> Iterator[Any]:
    """A selenium WebDriver of headless Chromium with a fresh --user-data-dir, its browser log
    (`driver.get_log("browser")`) recorded at every level."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="rlspec-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument(f"--window-size={width},{height}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def screenshot(page: Path, png: Path, *, width: int = 1600, height: int = 1000) -> None:
    """A PNG of the top of `page` (a local HTML file) at the given window size."""
    with chromium(width, height) as driver:
        driver.get(page.resolve().as_uri())
        png.parent.mkdir(parents=True, exist_ok=True)
        if not driver.save_screenshot(str(png)):
            raise RuntimeError(f"chromium could not save a screenshot of {page}")
