"""The conformance site in a real browser: headless Chromium (Debian's chromium + chromium-driver,
driven by selenium) opens the built site from file://, finds no console errors, counts the matrix
cells against the report JSON, follows a FAIL cell to its reproduce command and sees the plots load.

`pytest -m browser` (`.ci/run` installs the browser); skipped with the reason where it is missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.site import browser
from tests.conformance import site_fixture

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(browser.missing() is not None, reason=f"no headless browser: {browser.missing()}")]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> site_fixture.Built:
    """The committed reports' site, plus a column from the hand-written report (named `fixture`), so
    that there is a FAIL cell whatever the committed reports say."""
    tmp = tmp_path_factory.mktemp("browser")
    extra = tmp / "fixture.json"
    extra.write_text(json.dumps(site_fixture.report("fixture", "0.0.1")))
    return site_fixture.build_committed(tmp, (extra,))


@pytest.fixture(scope="module")
def site(built) -> Path:
    return built.out


@pytest.fixture(scope="module")
def driver():
    with browser.chromium() as d:
        yield d


def _open(driver, path: Path) -> None:
    driver.get(path.resolve().as_uri())
    driver.find_element("css selector", "main")  # the page is there


def _errors(driver) -> list[dict]:
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def _reports(built: site_fixture.Built) -> dict[str, dict]:
    """The report of every column: the snapshot's, and the hand-written one."""
    out = {}
    for name in built.names:
        path = built.reports / f"{name}.json"
        if path.exists():
            out[name] = json.loads(path.read_text())
    out["fixture"] = site_fixture.report("fixture", "0.0.1")
    return out


def test_matrix_cells_match_the_reports_without_console_errors(driver, built, site):
    _open(driver, site / "index.html")
    assert _errors(driver) == []
    rows = driver.find_elements("css selector", "#matrix tr.quantity")
    for name, data in _reports(built).items():
        cells = driver.find_elements("css selector", f'#matrix td.cell[data-adapter="{name}"]')
        assert len(cells) == len(rows)
        checked = [c for c in cells if c.get_attribute("data-status") != "absent"]
        core = [r for r in data["checks"] if r["id"] == f"{r['function']}@{r['adapter']}"]
        assert len(checked) == len(core), name
        # textContent: a cell scrolled out of the table's view has no rendered .text; "FAIL partial" is a FAIL
        fails = sorted(c.get_attribute("data-row") for c in checked if c.get_attribute("textContent").split()[0] == "FAIL")
        assert fails == sorted(r["function"] for r in core if r["status"] == "fail"), name
    for name in set(built.names) - set(_reports(built)):
        cells = driver.find_elements("css selector", f'#matrix td.cell[data-adapter="{name}"]')
        assert {c.get_attribute("textContent") for c in cells} == {"not installed"}


def test_a_fail_cell_leads_to_its_reproduce_command(driver, built, site):
    _open(driver, site / "index.html")
    expected = {(r["adapter"], r["function"]): r["reproduce"] for data in _reports(built).values()
                for r in data["checks"] if r["status"] == "fail" and r["id"] == f"{r['function']}@{r['adapter']}"}
    fail = driver.find_elements("css selector", "#matrix td.cell.s-fail")
    assert len(fail) == len(expected) >= 1
    cell = fail[0]
    key = (cell.get_attribute("data-adapter"), cell.get_attribute("data-row"))
    cell.find_element("css selector", "a").click()
    repro = driver.find_element("css selector", 'pre.repro[data-repro="row"]')
    assert repro.text == expected[key] and repro.text.startswith("rlspec repro ")
    assert "FAIL" in driver.find_element("css selector", "h1").text
    assert _errors(driver) == []


def test_the_row_filter_works(driver, site):
    _open(driver, site / "index.html")
    total = len(driver.find_elements("css selector", "#matrix tr.quantity"))
    driver.find_element("id", "row-filter").send_keys("gae")
    shown = [tr for tr in driver.find_elements("css selector", "#matrix tr.quantity") if tr.is_displayed()]
    assert 1 <= len(shown) < total and all("gae" in tr.text for tr in shown)
    driver.find_element("id", "row-filter").clear()
    driver.find_element("id", "only-findings").click()
    shown = [tr for tr in driver.find_elements("css selector", "#matrix tr.quantity") if tr.is_displayed()]
    assert shown and all("FAIL" in tr.text or "error" in tr.text or "precision" in tr.text for tr in shown)
    assert _errors(driver) == []


def test_plots_load(driver, built, site):
    _open(driver, site / "plots.html")
    images = driver.find_elements("css selector", "figure img")
    assert len(images) == len(list(built.reports.glob("*.png"))) >= 1
    for img in images:
        assert driver.execute_script("return arguments[0].complete && arguments[0].naturalWidth", img) > 0
    assert _errors(driver) == []


@pytest.mark.parametrize("page", ["mutants.html", "performance.html", "spec/index.html", "spec/loss.ppo.html",
                                  "frameworks/fixture.html"])
def test_other_pages_open_without_console_errors(driver, site, page):
    _open(driver, site / page)
    assert _errors(driver) == []
    assert driver.find_element("css selector", "h1").text


def test_screenshot_of_the_matrix(site, tmp_path):
    png = tmp_path / "matrix.png"
    browser.screenshot(site / "index.html", png, width=800, height=600)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
