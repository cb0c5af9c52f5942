"""A report page seen by a real browser: headless Chromium loads it, says which images loaded and where the
links go (`check_page`), or takes a screenshot of it (`screenshot`).

Decisions:

- Chromium's own command line, no driver library: ``--dump-dom`` prints the page after its load event,
  ``--screenshot`` writes a PNG of the window. Debian's package is ``chromium`` (CI installs it, see
  ``.ci/run``); `find_chromium` also accepts the other usual names on PATH.
- `check_page` loads a copy of the page with two additions: a ``<base>`` naming the page's own folder, so
  relative image and link paths resolve exactly as they do for the original, and a script that, on the load
  event (every image has then loaded or failed), replaces the body with a JSON record: each ``<img>`` and
  whether it decoded (``naturalWidth > 0``), each ``<a href>`` and the URL it resolves to. Whether a linked
  file exists is then checked here, on disk; an in-page ``#fragment`` must name an element id. Links to other
  sites (none in a report) are listed but not followed: nothing here goes on the network.
- Each call gets its own throwaway profile folder (``--user-data-dir``), so calls never share state or locks;
  ``--no-sandbox`` because CI runs as root, where Chromium's sandbox refuses to start.
"""

from __future__ import annotations

import html
import json
import logging
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from llm_collapse.errors import MissingDependencyError, UserError

__all__ = ["BrowserError", "PageCheck", "check_page", "find_chromium", "screenshot"]

logger = logging.getLogger(__name__)

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
INSTALL_HINT = "install Chromium (Debian: apt-get install chromium)"
TIMEOUT_S = 120.0
_FLAGS = ("--headless", "--disable-gpu", "--no-sandbox", "--no-first-run", "--hide-scrollbars")
_PROBE_ID = "llm-collapse-page-check"
_PROBE = f"""<script>
window.addEventListener("load", () => {{
  const images = Array.from(document.images, (img) => [img.getAttribute("src") || "",
    img.complete && img.naturalWidth > 0]);
  const links = Array.from(document.querySelectorAll("a[href]"), (a) => {{
    const href = a.getAttribute("href");
    return [href, a.href, href.startsWith("#") ? document.getElementById(decodeURIComponent(href.slice(1))) !== null : null];
  }});
  const box = (el) => el ? {{top: el.getBoundingClientRect().top, bottom: el.getBoundingClientRect().bottom,
    right: el.getBoundingClientRect().right, text: (el.querySelector("th, img") || el).getAttribute("alt")
    || el.innerText.slice(0, 200)}} : null;
  const layout = {{width: window.innerWidth, height: window.innerHeight,
    scroll_width: document.documentElement.scrollWidth, first_table: box(document.querySelector("table")),
    first_figure: box(document.querySelector("figure"))}};
  const out = document.createElement("pre");
  out.id = "{_PROBE_ID}";
  out.textContent = JSON.stringify({{images, links, layout}});
  document.body.replaceChildren(out);
}});
</script>
"""
_RECORD = re.compile(rf'<pre id="{_PROBE_ID}">(.*?)</pre>', re.DOTALL)


class BrowserError(UserError, RuntimeError):
    """Chromium failed on a page (exit status, timeout, no result); the message is one line."""


@dataclass(frozen=True)
class PageCheck:
    """What a browser made of a page.

    Attributes:
        images: ``(src, loaded)`` per ``<img>`` in page order; a ``data:`` src is cut to its first 40 characters.
        links: ``(href as written, target found)`` per ``<a href>``; None for a link to another site.
        layout: The page as the window shows it: ``width``/``height`` (the window), ``scroll_width`` (wider than
            ``width``: the page overflows sideways), and ``first_table``/``first_figure``: their ``top``,
            ``bottom`` and ``right`` edges in pixels and ``text`` (a table's first header cell, a figure's alt).
    """

    images: tuple[tuple[str, bool], ...]
    links: tuple[tuple[str, bool | None], ...]
    layout: dict = field(default_factory=dict, compare=False)

    @property
    def broken_images(self) -> list[str]:
        """Sources of the images that did not load."""
        return [src for src, loaded in self.images if not loaded]

    @property
    def broken_links(self) -> list[str]:
        """Links whose file (or in-page id) does not exist."""
        return [href for href, found in self.links if found is False]


def find_chromium() -> str | None:
    """Path of the first Chromium on PATH (`CHROMIUM_NAMES`), else None."""
    for name in CHROMIUM_NAMES:
        if found := shutil.which(name):
            return found
    return None


def _chromium(chromium: str | None) -> str:
    found = chromium or find_chromium()
    if found is None:
        raise MissingDependencyError(
            f"no Chromium found on PATH (tried {', '.join(CHROMIUM_NAMES)}); {INSTALL_HINT}"
        )
    return found


def _run(chromium: str | None, args: list[str], what: str, timeout: float) -> str:
    """Runs Chromium with its own throwaway profile; its stdout, or `BrowserError`."""
    binary = _chromium(chromium)
    with tempfile.TemporaryDirectory(prefix="llm-collapse-chromium-") as profile:
        command = [binary, *_FLAGS, f"--user-data-dir={profile}", *args]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise BrowserError(f"Chromium took over {timeout:.0f} s on {what}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise BrowserError(f"Chromium exited with status {done.returncode} on {what}: {last}")
    return done.stdout


def _page(path: Path | str) -> Path:
    page = Path(path).absolute()
    if not page.is_file():
        raise UserError(
            f"no such page: {str(path)!r}; give the path of an HTML file such as reports/default/report.html"
        )
    return page


def check_page(
    path: Path | str,
    *,
    chromium: str | None = None,
    timeout: float = TIMEOUT_S,
    window: tuple[int, int] = (1400, 1000),
) -> PageCheck:
    """Loads the page in headless Chromium: which images loaded, and whether each link's target exists.

    Args:
        path: An HTML file (a report.html).
        chromium: The browser binary (default: `find_chromium`).
        timeout: Seconds before the browser is given up on.
        window: The window's width and height in pixels (the layout is measured in it).

    Returns:
        The images, links and layout of the page (`PageCheck`).

    Raises:
        MissingDependencyError: No Chromium.
        BrowserError: Chromium failed, or the page never fired its load event.
    """
    page = _page(path)
    text = page.read_text(encoding="utf-8")
    base = f'<base href="{html.escape(page.parent.as_uri())}/">'
    head = re.search(r"<head[^>]*>", text, re.IGNORECASE)
    text = f"{text[: head.end()]}{base}{text[head.end() :]}" if head else base + text
    body_end = text.lower().rfind("</body>")
    text = f"{text[:body_end]}{_PROBE}{text[body_end:]}" if body_end >= 0 else text + _PROBE
    with tempfile.TemporaryDirectory(prefix="llm-collapse-page-") as folder:
        probe = Path(folder) / "page.html"
        probe.write_text(text, encoding="utf-8")
        size = [f"--window-size={window[0]},{window[1]}", "--force-device-scale-factor=1"]
        dom = _run(chromium, [*size, "--dump-dom", probe.as_uri()], str(page), timeout)
    match = _RECORD.search(dom)
    if match is None:
        raise BrowserError(f"Chromium returned no record for {page}: the page never finished loading")
    record = json.loads(html.unescape(match.group(1)))
    images = tuple((src[:40] if src.startswith("data:") else src, bool(ok)) for src, ok in record["images"])
    links = tuple((href, _found(url, in_page)) for href, url, in_page in record["links"])
    logger.info("%s: %d images, %d links", page, len(images), len(links))
    return PageCheck(images, links, record.get("layout") or {})


def _found(url: str, in_page: bool | None) -> bool | None:
    """Whether a link's target exists: an in-page id (``in_page``), a local file, or None for another site."""
    if in_page is not None:
        return in_page
    parts = urlsplit(url)
    if parts.scheme != "file":
        return None
    return Path(unquote(parts.path)).exists()


def screenshot(
    path: Path | str,
    out: Path | str,
    *,
    width: int = 1280,
    height: int = 1600,
    chromium: str | None = None,
    timeout: float = TIMEOUT_S,
) -> Path:
    """Writes a PNG of the top ``width`` x ``height`` pixels of the page as headless Chromium shows it.

    The PNG is written to a temporary folder and moved to ``out`` only when Chromium succeeded.

    Returns:
        ``out`` as an absolute path.

    Raises:
        MissingDependencyError: No Chromium.
        BrowserError: Chromium failed or wrote no image.
    """
    page = _page(path)
    out = Path(out).absolute()
    with tempfile.TemporaryDirectory(prefix="llm-collapse-shot-") as folder:
        shot = Path(folder) / "shot.png"
        args = [f"--screenshot={shot}", f"--window-size={width},{height}", "--force-device-scale-factor=1"]
        _run(chromium, [*args, page.as_uri()], str(page), timeout)
        if not shot.is_file():
            raise BrowserError(f"Chromium wrote no screenshot of {page}")
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(shot), str(out))
    logger.info("screenshot of %s: %s", page, out)
    return out
