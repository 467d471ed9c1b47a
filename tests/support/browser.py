"""Opening a `dse report --html` page in a real browser: Debian's Chromium (``.ci/run`` installs
it) driven headless by Playwright, offline, never a browser of Playwright's own.

Also what the page says of each figure besides its image (``data-axes``, ``data-texts``,
``data-overlaps``: ``dse.report._drawn``), read back as the browser has it, and the screenshot kept
as
an artefact: in the test's tmp dir, and copied to ``$DSE_ARTIFACTS`` when that is set.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

CHROMIUM_FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def chromium() -> str:
    """The system Chromium's path (the test skips without one)."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("no Chromium here: `apt-get install chromium` (.ci/run installs it)")
    return path


@contextlib.contextmanager
def browser_page(errors: list[str], requests: list[str]) -> Iterator[Any]:
    """A page of a headless Chromium (1200 x 900), its console errors and page errors
    appended to *errors*, every URL it requests to *requests*."""
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    path = chromium()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=path, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            yield page
        finally:
            browser.close()


def figure_data(page: Any, key: str) -> dict[str, Any]:
    """What the page says of figure *key* besides its image: ``axes`` (each axes' labels,
    scales, drawn tick labels), ``texts`` (every text drawn: ``[text, left, top, right,
    bottom]`` in the image's pixels), ``overlaps`` (pairs of texts), and the image's
    ``width``, ``height`` and ``natural`` (its decoded width and height)."""
    found = page.eval_on_selector(f"#plot-{key}", """img => ({
        axes: img.dataset.axes, texts: img.dataset.texts, overlaps: img.dataset.overlaps,
        width: img.getAttribute('width'), height: img.getAttribute('height'),
        natural: [img.naturalWidth, img.naturalHeight], complete: img.complete})""")
    return {
        "axes": json.loads(found["axes"]), "texts": json.loads(found["texts"]),
        "overlaps": json.loads(found["overlaps"]), "width": int(found["width"]),
        "height": int(found["height"]), "natural": found["natural"],
        "complete": found["complete"],
    }


def overlapping(texts: list[list[Any]], slack: float = 1.0) -> list[tuple[str, str]]:
    """The pairs of *texts* (``[text, left, top, right, bottom]``) whose boxes share more
    than *slack* pixels each way: worked out here again, not taken from the page's word."""
    pairs = []
    for i, (a, al, at, ar, ab) in enumerate(texts):
        for b, bl, bt, br, bb in texts[i + 1:]:
            if min(ar, br) - max(al, bl) > slack and min(ab, bb) - max(at, bt) > slack:
                pairs.append((a, b))
    return pairs


def by_name(axes: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """A figure's ``data-axes`` by each axes' name (those with one)."""
    return {a["name"]: a for a in axes if a["name"]}


def distinct_colours(png: bytes) -> tuple[int, int, int]:
    """The PNG image *png* decoded: its width, height and how many distinct colours it has."""
    import matplotlib.image
    import numpy as np

    pixels = np.asarray(matplotlib.image.imread(io.BytesIO(png), format="png"))
    flat = (pixels[..., :3] * 255).round().astype(np.uint8).reshape(-1, 3)
    return pixels.shape[1], pixels.shape[0], len(np.unique(flat, axis=0))


def keep_screenshot(page: Any, tmp_path: Path, name: str) -> tuple[Path, bytes]:
    """A full-page screenshot written to *tmp_path*/*name* and, when ``$DSE_ARTIFACTS`` is
    set, copied there (its path printed either way); returns its path and bytes."""
    png = page.screenshot(full_page=True)
    path = tmp_path / name
    path.write_bytes(png)
    print(f"screenshot: {path}")
    kept = os.environ.get("DSE_ARTIFACTS")
    if kept:
        Path(kept).mkdir(parents=True, exist_ok=True)
        print(f"screenshot kept: {shutil.copy(path, Path(kept) / name)}")
    return path, png
