"""The README's picture of the fleet dashboard (tests/tools/dashboard_picture.py): every panel of the JSON gpufleet
generates is drawn at its grid position, the image says it is gpufleet's rendering with sample data (Grafana cannot
run here), and the README shows it with the same words."""

from __future__ import annotations

import importlib.util
import shutil

import pytest

from gpufleet.monitoring import dashboards

from conftest import ROOT

pytest.importorskip("grafana_foundation_sdk")
PNG = ROOT / "docs" / "monitoring-fleet-dashboard.png"


def _tool():
    spec = importlib.util.spec_from_file_location("dashboard_picture", ROOT / "tests" / "tools" / "dashboard_picture.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_panel_of_the_fleet_dashboard_is_drawn_with_the_label():
    tool, dash = _tool(), dashboards.build()["gpufleet-fleet"]
    text = tool.page(dash)
    assert tool.LABEL in text
    panels = [p for p in dash["panels"] if p["type"] != "row"]
    assert text.count('class="panel"') == len(panels)
    for p in dash["panels"]:
        assert f">{p['title'].replace('&', '&amp;')}<" in text, p["title"]


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian's chromium is not installed (`make sysdeps`)")
def test_chromium_photographs_it_without_an_error(tmp_path):
    pytest.importorskip("playwright")
    errors = _tool().shoot(dashboards.build()["gpufleet-fleet"], tmp_path / "fleet.png", tmp_path / "work")
    assert errors == [] and (tmp_path / "fleet.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_readme_shows_the_picture_and_says_what_it_is():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Monitoring"):]
    section = section[:section.find("\n## ", 4)]
    assert "](docs/monitoring-fleet-dashboard.png)" in section and _tool().LABEL in section
    assert PNG.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for command in ("gpufleet dashboard export", "gpufleet dashboard ", "monitoring:"):
        assert command in section, command
