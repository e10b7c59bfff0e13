"""report.html opened the way a person opens it: in a real browser (Debian's chromium, headless).

The page is written by the same ``report.write`` every run uses, from a judged run. The browser's
own DOM says what a reader sees (the verdict, every node with its verdict, the picture), its
screenshot is read for the verdict's colour and the figure's lines, and its console says whether the
page tried to load anything. The screenshot is kept under out/test-artifacts/ for a person to look at.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.workloads.test_validate_judge import _write_run
from gpu_cluster.workloads.validate import report_html
from gpu_cluster.workloads.validate.judge import judge
from gpu_cluster.workloads.validate.report import write
from gpu_cluster.workloads.validate.verdict import Verdict

ARTIFACTS = Path(__file__).resolve().parents[2] / "out" / "test-artifacts"
CHROMIUM = shutil.which("chromium")
# The flags this machine's browser needs to start headless without a network (the environment's
# notes: without the background-networking ones it tries Google's hosts at every start).
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


class _Rows(HTMLParser):
    """The text of each row of the nodes table, cell by cell, and whether an <svg> is on the page."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.svg = 0
        self._in_nodes = False
        self._cell: list[str] | None = None
        self.verdict_banner = ""
        self._in_h1 = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table" and a.get("class") == "nodes":
            self._in_nodes = True
        elif tag == "tr" and self._in_nodes:
            self.rows.append([])
        elif tag == "td" and self._in_nodes:
            self._cell = []
        elif tag == "svg":
            self.svg += 1
        elif tag == "h1":
            self._in_h1 = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._in_nodes = False
        elif tag == "td" and self._cell is not None:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "h1":
            self._in_h1 = False

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        if self._in_h1:
            self.verdict_banner += data


def _failed_run(tmp_path: Path) -> tuple[Path, list[tuple[str, str]]]:
    (tmp_path / "run").mkdir()
    _write_run(tmp_path / "run", multi=300.0, node2_rate=350.0)
    rep = judge(tmp_path / "run", instance_type="p5.48xlarge", local=False)
    assert rep.verdict == Verdict.FAIL and len(rep.nodes) >= 2
    written = write(rep, tmp_path / "out")
    return written["report.html"], [(n.node, n.verdict.name) for n in rep.nodes]


def test_the_page_loads_nothing_and_holds_the_verdict_nodes_and_picture(tmp_path: Path) -> None:
    page, nodes = _failed_run(tmp_path)
    text = page.read_text(encoding="utf-8")
    # Self-contained: no script, no external stylesheet, image or font, and a policy that forbids them.
    assert "<script" not in text and "<link" not in text and "@import" not in text
    assert 'src="http' not in text and "url(http" not in text and 'xlink:href="http' not in text
    assert "default-src 'none'" in text
    parsed = _Rows()
    parsed.feed(text)
    assert parsed.verdict_banner.startswith("Cluster validation: FAIL")
    assert [(r[0], r[1]) for r in parsed.rows if r] == nodes
    assert parsed.svg >= 1


def test_heal_replaces_the_incidents_in_place(tmp_path: Path) -> None:
    page, nodes = _failed_run(tmp_path)
    text = page.read_text(encoding="utf-8")
    bad = next(n for n, v in nodes if v == "FAIL")
    again = report_html.with_incidents(
        text,
        [
            {
                "node": bad,
                "state": "HEALTHY",
                "incident": "h-0123456789",
                "old_instance": "i-0old",
                "new_instance": "i-0abc",
                "why": "slow",
            }
        ],
    )
    assert again.count(report_html.INCIDENTS_BEGIN) == 1 and "h-0123456789" in again
    assert "i-0old -&gt; i-0abc" in again
    # a second record replaces the first rather than adding to it
    twice = report_html.with_incidents(again, [])
    assert "h-0123456789" not in twice and twice.count(report_html.INCIDENTS_END) == 1
    with pytest.raises(ValueError, match="no incidents markers"):
        report_html.with_incidents("<html></html>", [])


@pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"), reason="chromium is not installed (make sysdeps)")
def test_a_real_browser_shows_the_verdict_every_node_and_the_picture(tmp_path: Path) -> None:
    assert CHROMIUM, "CI installs chromium (scripts/install-system-deps.sh); it is missing"
    page, nodes = _failed_run(tmp_path)
    url = page.resolve().as_uri()
    profile = tmp_path / "profile"

    dom = subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    parsed = _Rows()
    parsed.feed(dom.stdout)
    assert parsed.verdict_banner.startswith("Cluster validation: FAIL"), dom.stdout[:500]
    assert [(r[0], r[1]) for r in parsed.rows if r] == nodes
    assert parsed.svg >= 1
    # The content security policy makes the browser refuse (and say so) any load the page tries.
    assert "Refused to" not in dom.stderr, dom.stderr[-2000:]

    shot = tmp_path / "report.png"
    done = subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--window-size=1200,2600", f"--screenshot={shot}", url],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shot, ARTIFACTS / "report-html.png")

    from PIL import Image

    with Image.open(shot) as img:
        rgb = img.convert("RGB")
        width, height = rgb.size
        # The banner across the top is the FAIL colour.
        fail = tuple(int(report_html.VERDICT_COLOURS["FAIL"][i : i + 2], 16) for i in (1, 3, 5))
        assert rgb.getpixel((width // 2, 8)) == fail
        # The figure is drawn: the curves in matplotlib's cycle colours (tab:orange #ff7f0e, tab:green
        # #2ca02c; two nodes with the same sweep hide tab:blue under tab:orange) cover more than a few
        # stray pixels.
        colours = rgb.getcolors(maxcolors=width * height) or []

        def near(rgb_hex: str) -> int:
            want = tuple(int(rgb_hex[i : i + 2], 16) for i in (0, 2, 4))
            return sum(n for n, c in colours if all(abs(a - b) < 24 for a, b in zip(c, want)))

        drawn = {name: near(hexa) for name, hexa in (("orange", "ff7f0e"), ("green", "2ca02c"))}
        assert all(n > 200 for n in drawn.values()), drawn
