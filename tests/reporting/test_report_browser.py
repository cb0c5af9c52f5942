"""report.html in a real headless browser (Chromium): every image loads and no link is broken, for a report
built here from a tiny run and for the committed study report; and the screenshot command.

Skipped where no Chromium is installed (Debian: ``apt-get install chromium``); ``.ci/run`` installs it, so CI
runs these tests.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from llm_collapse.reporting.browser import check_page, find_chromium
from llm_collapse.reporting.screenshot import main as screenshot_main
from llm_collapse.reporting.synthetic_runs import write_synthetic_run

pytest.importorskip("seaborn")

STUDY = Path(__file__).resolve().parents[2] / "reports" / "study"
needs_chromium = pytest.mark.skipif(
    find_chromium() is None,
    reason="no Chromium on PATH (Debian: apt-get install chromium; .ci/run installs it)",
)


@pytest.fixture(scope="module")
def tiny_report(tmp_path_factory):
    """A run report built from a small synthetic run (two tasks, one with a depth heatmap)."""
    from llm_collapse.reporting import build_report

    run = write_synthetic_run(
        tmp_path_factory.mktemp("browser") / "run", models=("m",), methods=("base", "tempscale:0.5"),
        tasks=("collapse", "passkey"),
    )  # fmt: skip
    build_report([run], run)
    return run / "report.html"


def _tags(page: Path, pattern: str) -> list[str]:
    return re.findall(pattern, page.read_text(encoding="utf-8"))


@needs_chromium
def test_run_report_images_all_load(tiny_report):
    check = check_page(tiny_report)
    figures = sorted((tiny_report.parent / "figures").glob("*.png"))
    assert len(check.images) == len(figures) == len(_tags(tiny_report, r"<img ")) > 0
    assert check.broken_images == [] and check.broken_links == []


@needs_chromium
def test_committed_study_report_images_load_and_links_resolve():
    page = STUDY / "report.html"
    check = check_page(page)
    assert len(check.images) == len(_tags(page, r"<img ")) > 0
    assert check.broken_images == []
    assert check.broken_links == []
    # the runs' links are real <a> elements, to the committed run reports (report.md; report.html is not kept)
    runs = {href for href, _ in check.links if href.endswith("/report.md")}
    listed = set(re.findall(r"\]\(([^)\s]+/report\.md)\)", (STUDY / "report.md").read_text(encoding="utf-8")))
    assert runs and runs == listed


@needs_chromium
def test_broken_images_and_links_are_reported(tiny_report, tmp_path):
    """The check can fail: a corrupt embedded PNG, a missing image file and dead links are each named."""
    text = tiny_report.read_text(encoding="utf-8")
    first = text.index("data:image/png;base64,") + len("data:image/png;base64,")
    text = text[:first] + "AAAA" + text[first + 4 :]  # a PNG that no longer decodes
    extra = (
        '<img src="figures/missing.png" alt="gone"><a href="figures/missing.png">a</a>'
        '<a href="#nowhere">b</a><a href="report.html">c</a><a href="#top">d</a><p id="top">top</p>'
    )
    text = text.replace("</body>", extra + "</body>")
    broken = tmp_path / "report.html"
    broken.write_text(text, encoding="utf-8")
    check = check_page(broken)
    corrupt, missing = check.broken_images
    assert corrupt.startswith("data:image/png;base64,AAAA") and missing == "figures/missing.png"
    assert len(check.images) == len(_tags(broken, r"<img "))
    assert check.broken_links == ["figures/missing.png", "#nowhere"]
    assert ("report.html", True) in check.links and ("#top", True) in check.links


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


@needs_chromium
def test_screenshot_writes_a_png_of_the_window(tiny_report, tmp_path, capsys):
    from PIL import Image

    out = tmp_path / "shots" / "report.png"
    assert screenshot_main([str(tiny_report), str(out), "--width", "900", "--height", "700"]) == 0
    assert _png_size(out) == (900, 700)
    assert (
        len(Image.open(out).convert("RGB").getcolors(maxcolors=1 << 16) or range(1 << 16)) > 10
    )  # not blank
    assert f"wrote {out}" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["missing.html", "out.png"], "no such page: 'missing.html'"),
        (["PAGE", "out.jpg"], "must end in .png"),
        (["PAGE", "out.png", "--width", "12"], "size '12' must be a whole number of pixels from 200 to 8000"),
    ],
)
def test_screenshot_bad_input_is_one_line_and_writes_nothing(argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "page.html").write_text("<html><body>x</body></html>")
    before = sorted(tmp_path.iterdir())
    assert screenshot_main([a.replace("PAGE", "page.html") for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert sorted(tmp_path.iterdir()) == before
