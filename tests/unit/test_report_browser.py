"""The report in a real browser: headless Chromium (Debian's `chromium`, `make sysdeps`) driven by
Playwright's Python package with the system browser (nothing downloaded) opens the HTML file
with the network cut off, and the page shows no console error, fetches nothing, and lays out
every chart (each SVG has a size, its axis labels are there as text). A screenshot of each page
is kept under tmp_path and copied to $GPUFLEET_REPORT_SHOTS (default: gpufleet-report-shots in the
temporary folder) for a person to look at."""

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from test_report import registry_with_clusters, user_config

from conftest import ROOT, require
from conftest import cli as run

SHOTS = Path(os.environ.get("GPUFLEET_REPORT_SHOTS") or Path(tempfile.gettempdir()) / "gpufleet-report-shots")


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser():
    exe = _chromium()
    require(exe is not None, "Debian's chromium is not installed (`make sysdeps`, as root)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        require(False, "playwright is not installed (the test extra installs it)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


def _open(browser, path: Path, shot: Path, width: int = 1280):
    """The page, its console errors and every request it made other than the file itself."""
    page = browser.new_page(viewport={"width": width, "height": 900})
    errors, requests = [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url) if r.url != path.as_uri() else None)
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort())
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    page.screenshot(path=str(shot), full_page=True)
    SHOTS.mkdir(exist_ok=True)
    shutil.copy(shot, SHOTS / shot.name)
    return page, errors, requests


def _charts_laid_out(page, labels: list[str]) -> list[dict]:
    boxes = []
    for svg in page.locator("figure svg").all():
        box = svg.bounding_box()
        assert box and box["width"] > 200 and box["height"] > 100, box
        boxes.append(box)
    texts = page.locator("figure svg text").all_text_contents()
    for label in labels:
        assert any(label in t for t in texts), (label, texts[:40])
        el = page.locator("figure svg text", has_text=label).first
        b = el.bounding_box()
        assert b and b["width"] > 0 and b["height"] > 0, (label, b)
    return boxes


@pytest.mark.slow
def test_the_report_opens_in_chromium_offline_with_its_charts_laid_out(browser, tmp_path):
    out = tmp_path / "resnet50.html"
    r = run("--json", "--config", user_config(tmp_path), "report", "resnet50", "--out", str(out))
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    picks = summary["picks"]
    page, errors, requests = _open(browser, out, tmp_path / "report-resnet50.png")
    assert errors == [] and requests == []
    boxes = _charts_laid_out(page, ["Time to train (hours)", "Cost to train (USD)", "Nodes",
                                    "Scaling efficiency (%)", "Utilisation of the rack (%)"])
    assert len(boxes) == 3  # cost vs time, scaling, own vs rent for the config's rack
    # every feasible offer is a point with a size on the page, and the picks are labelled on the chart
    points = page.locator("#chart-cost-time g.point")
    assert points.count() == summary["feasible"]
    for i in (0, points.count() - 1):
        box = points.nth(i).bounding_box()
        assert box and box["width"] > 0 and box["height"] > 0
    chart_text = " ".join(page.locator("#chart-cost-time svg text").all_text_contents())
    for p in picks.values():
        assert p["offer"] in chart_text
    # the page fits a laptop screen without a horizontal scroll bar, and prints
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    pdf = page.pdf(path=str(tmp_path / "report.pdf"))
    assert pdf[:4] == b"%PDF"
    page.close()


@pytest.mark.slow
def test_the_clusters_report_opens_in_chromium(browser, tmp_path, monkeypatch):
    registry_with_clusters(tmp_path, monkeypatch)
    out = tmp_path / "clusters.html"
    r = run("report", "--clusters", "--local", "--out", str(out))
    assert r.exit_code == 0, r.output
    page, errors, requests = _open(browser, out, tmp_path / "report-clusters.png")
    assert errors == [] and requests == []
    _charts_laid_out(page, ["Cost so far (USD)", "Time (UTC)", "Per provider"])
    assert page.locator("tr.alert").count() == 1  # the cluster past its TTL
    page.close()


def test_screenshots_folder_is_outside_the_repository():
    assert not SHOTS.resolve().is_relative_to(ROOT)
