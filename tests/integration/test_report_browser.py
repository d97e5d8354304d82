"""report.html of a real sweep, opened in a real browser (headless Chromium through selenium and chromedriver).

One small real sweep (the tiny model on 1 CPU rank, 3 timed steps): ``gc=true,false`` x ``precision=fp32,fp16``
gives 2 ``ok`` points and 2 points the gate refuses before launch (fp16 on CPU: ``unsupported``, rule H01). The page
must load with no console error and without the network (plotly.js is inlined), draw one marker per ok point and
the frontier (in plotly's figure data and in the SVG it draws), list the refused points with their reasons, and
open on the answer that results.csv gives. A full-page screenshot is saved under the test's ``tmp_path`` and,
when ``SWEEPER_TEST_ARTIFACTS`` names a directory, copied there.

Chromium and chromedriver are the Debian packages ``chromium`` and ``chromium-driver`` (``.ci/run`` installs
them); without them these tests fail, they do not skip.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sweeper.report.plot_data import PREDICTED_STRETCH, Y_HEADROOM
from sweeper.results.frontier import mark_ties, throughput_interval
from tests.conftest import SweepRun, run_sweeper

pytestmark = pytest.mark.slow

#: The swept axes, which name a configuration in the headline (``gc=false precision=fp32``).
AXES = ("gc", "precision")
SWEEP = [
    "-m",
    "gc=true,false",
    "precision=fp32,fp16",  # fp16 on CPU is refused by the gate (H01): two unsupported points, never launched
    "ranks_per_node=1",
    "warmup_steps=1",
    "timed_steps=3",
    "memory_steps=1",
    "profile_steps=0",
    "profile_trace=false",
]
#: Browser window, CSS pixels.
WINDOW = (1400, 1000)
#: Tied points the headline names before "and N more" (sweeper.report.headline.MAX_TIED).
MAX_TIED = 3
_PACKAGES = "the Debian packages `chromium` and `chromium-driver` (apt-get install -y chromium chromium-driver)"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> SweepRun:
    """The finished sweep (about 20 s on 2 cores)."""
    run = run_sweeper(SWEEP, tmp_path_factory.mktemp("browser"), timeout=600)
    assert run.proc.returncode == 0, run.output[-4000:]
    assert run.sweep_dir is not None and (run.sweep_dir / "report.html").is_file(), run.output[-4000:]
    return run


@pytest.fixture(scope="module")
def results(sweep: SweepRun) -> pd.DataFrame:
    """results.csv of the sweep: at least 2 ok points and 1 that is not."""
    df = pd.read_csv(sweep.sweep_dir / "results.csv", dtype={"point_id": str})
    assert (df["status"] == "ok").sum() >= 2 and (df["status"] != "ok").sum() >= 1, df[["point_id", "status"]]
    return df


@pytest.fixture(scope="module")
def driver():
    """Headless Chromium driven by the system chromedriver (never selenium-manager: no network)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser = next((p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None)
    chromedriver = shutil.which("chromedriver")
    if not browser or not chromedriver:
        pytest.fail(
            f"the report browser test needs Chromium and chromedriver on PATH (found chromium={browser}, "
            f"chromedriver={chromedriver}): install {_PACKAGES}; .ci/run does",
            pytrace=False,
        )
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(service=Service(chromedriver), options=opts)
    try:
        yield drv
    finally:
        drv.quit()


@pytest.fixture(scope="module")
def page(driver, sweep: SweepRun) -> dict:
    """report.html loaded and its plot drawn; ``log``: the browser console entries of the load."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get((sweep.sweep_dir / "report.html").resolve().as_uri())
    WebDriverWait(driver, 60).until(
        lambda d: d.execute_script(
            "const g = document.querySelector('.js-plotly-plot');"
            "return !!(g && g._fullLayout && g.querySelector('.scatterlayer .trace .point'));"
        )
    )
    return {"driver": driver, "log": driver.get_log("browser")}


def _values(v) -> list:
    """A plotly data array as a list: a plain array, or plotly's typed-array spec ``{dtype, bdata}`` (base64)."""
    if v is None:
        return []
    if isinstance(v, list):
        return v
    if isinstance(v, dict) and "bdata" in v:
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype("<" + v["dtype"])).tolist()
    if isinstance(v, dict):  # a typed array serialized by index
        return [v[k] for k in sorted((k for k in v if k.isdigit()), key=int)]
    raise AssertionError(f"not a plotly data array: {v!r}")


def _name(row: pd.Series) -> str:
    """A configuration as the headline names it: its values on the swept axes (booleans lower-case)."""
    vals = [(a, row[a]) for a in AXES]
    return " ".join(f"{a}={str(v).lower() if isinstance(v, (bool, np.bool_)) else v}" for a, v in vals)


def _ok(df: pd.DataFrame) -> pd.DataFrame:
    """The ok points with both numbers (what the plot draws and the headline compares)."""
    tps = pd.to_numeric(df["tokens_per_s_per_device"], errors="coerce")
    mem = pd.to_numeric(df["peak_mem_bytes"], errors="coerce")
    keep = (df["status"] == "ok") & tps.notna() & mem.notna()
    return df[keep].copy().assign(_tps=tps[keep], _mem=mem[keep])


def test_the_page_loads_with_no_console_error_and_needs_no_network(page):
    severe = [e for e in page["log"] if e.get("level") == "SEVERE"]
    assert not severe, severe
    d = page["driver"]
    assert d.execute_script("return typeof Plotly") == "object"  # inlined, not fetched
    external = d.execute_script(
        "return [...document.querySelectorAll('script[src], link[href], img[src], iframe[src]')]"
        ".map(e => e.src || e.href)"
    )
    assert external == [], external


def test_the_figure_data_has_one_marker_per_ok_point_and_the_frontier(page, results):
    d = page["driver"]
    traces = d.execute_script(
        "return document.querySelector('.js-plotly-plot').data"
        ".map(t => ({name: t.name, visible: t.visible, mode: t.mode, x: t.x, y: t.y}));"
    )
    fig = {t["name"]: t for t in traces}
    layout_titles = d.execute_script(
        "const L = document.querySelector('.js-plotly-plot')._fullLayout;"
        "return Object.keys(L).filter(k => k.startsWith('xaxis')).map(k => L[k].title && L[k].title.text);"
    )
    (unit,) = {m.group(1) for t in layout_titles if t for m in [re.search(r"\((MiB|GiB)\)", t)] if m}
    scale = 2**20 if unit == "MiB" else 2**30
    ok = _ok(results)

    def pairs(frame: pd.DataFrame) -> list[float]:
        """(x, y) of each point in the plot's units, sorted, flattened (for pytest.approx)."""
        return [v for xy in sorted(zip(frame["_mem"] / scale, frame["_tps"], strict=True)) for v in xy]

    def drawn(name: str) -> list[float]:
        return [v for xy in sorted(zip(_values(fig[name]["x"]), _values(fig[name]["y"]), strict=True)) for v in xy]

    assert fig["ok"].get("visible") in (None, True)
    assert len(_values(fig["ok"]["x"])) == len(ok)  # one marker per ok point
    assert drawn("ok") == pytest.approx(pairs(ok))
    assert "Pareto frontier" in fig, list(fig)
    front = ok[ok["on_frontier"].astype(bool)]
    assert len(front) >= 1
    assert drawn("Pareto frontier") == pytest.approx(pairs(front))
    failed = results[results["status"] != "ok"]
    strip = [t for t in traces if t["name"] in set(failed["status"])]
    assert sum(len(_values(t["x"])) for t in strip) == len(failed)
    if "predicted" in fig:  # capacity planning's markers: one per ok point at most
        assert len(_values(fig["predicted"]["x"])) <= len(ok)


def test_the_svg_draws_the_ok_points_inside_the_plot_and_the_frontier_line(page, results):
    d = page["driver"]
    drawn = d.execute_script(
        """
        const gd = document.querySelector('.js-plotly-plot');
        const box = r => { const b = r.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
        const area = {};
        gd.querySelectorAll('.draglayer .nsewdrag').forEach(r => { area[r.getAttribute('data-subplot')] = box(r); });
        const traces = [...gd.querySelectorAll('.scatterlayer .trace')].map(el => {
          const t = el.__data__ && el.__data__[0] && el.__data__[0].trace;
          return {
            name: t ? t.name : null,
            points: [...el.querySelectorAll('.point')].map(box),
            lines: [...el.querySelectorAll('path.js-line')].map(p => p.getAttribute('d') || ''),
          };
        });
        return {area, traces, yrange: gd._fullLayout.yaxis.range};
        """
    )
    svg = {t["name"]: t for t in drawn["traces"]}
    ok = _ok(results)
    n_front = int(ok["on_frontier"].astype(bool).sum())
    assert len(svg["ok"]["points"]) == len(ok), svg.keys()
    left, top, right, bottom = drawn["area"]["xy"]
    centres = [((a + c) / 2, (b + e) / 2) for a, b, c, e in svg["ok"]["points"]]
    for cx, cy in centres:  # every measured point inside the throughput plot, none clipped away
        assert left <= cx <= right and top <= cy <= bottom, (cx, cy, drawn["area"]["xy"])
    # the throughput axis is the measured points': from 0 to the top of the highest interval bar x Y_HEADROOM,
    # widened for the predicted markers by at most PREDICTED_STRETCH, never squashed by them
    y0, y1 = drawn["yrange"]
    _, high = throughput_interval(ok)
    want = float(high.max()) * Y_HEADROOM
    assert y0 == pytest.approx(0.0, abs=1e-9) and want * (1 - 1e-6) <= y1 <= want * PREDICTED_STRETCH * (1 + 1e-6), (
        drawn["yrange"],
        want,
    )
    # and each marker is drawn where its tokens/s per device puts it on that axis (within 2 px)
    fastest = float(ok["tokens_per_s_per_device"].max())
    assert min(cy for _, cy in centres) == pytest.approx(bottom - (bottom - top) * fastest / y1, abs=2.0), (
        centres,
        drawn["area"]["xy"],
        drawn["yrange"],
    )
    assert len(svg["Pareto frontier"]["points"]) == n_front
    if n_front >= 2:  # a staircase through the frontier points
        assert any(re.match(r"M[\d.\-]+,[\d.\-]+[HVL]", p) for p in svg["Pareto frontier"]["lines"]), svg[
            "Pareto frontier"
        ]["lines"]
    failed = results[results["status"] != "ok"]
    in_strip = sum(len(t["points"]) for t in drawn["traces"] if t["name"] in set(failed["status"]))
    assert in_strip == len(failed)


def test_the_failed_points_are_listed_with_their_reasons(page, results):
    from selenium.webdriver.common.by import By

    d = page["driver"]
    failed = results[results["status"] != "ok"]
    heading = d.find_element(By.XPATH, "//h2[normalize-space()='Failures']")
    table = heading.find_element(By.XPATH, "following-sibling::table[1]")
    body = " ".join(d.find_element(By.TAG_NAME, "body").text.split())
    for pid, status, reason in zip(failed["point_id"], failed["status"], failed["reason"], strict=True):
        (row,) = table.find_elements(By.XPATH, f".//tr[td[normalize-space()='{pid}']]")
        assert row.is_displayed()
        text = " ".join(row.text.split())
        assert status in text and " ".join(str(reason).split()) in text, (text, reason)
        assert " ".join(str(reason).split()) in body  # visible text (a folded block's is not)


def _tie_part(pids: list[str], names: dict[str, str], why: str) -> str:
    if not pids:
        return ""
    shown = ", ".join(names.get(t, t) for t in pids[:MAX_TIED])
    more = f" and {len(pids) - MAX_TIED:,} more" if len(pids) > MAX_TIED else ""
    return f", tied with {shown}{more} ({why})"


def test_the_first_section_names_the_fastest_and_the_least_memory_configuration(page, results):
    d = page["driver"]
    first = d.execute_script(
        """
        const out = [];
        for (let el = document.querySelector('h1').nextElementSibling; el && el.tagName !== 'H2';
             el = el.nextElementSibling) out.push(el.innerText);
        return out.join('\\n');
        """
    )
    first = " ".join(first.split())
    ok = _ok(results).assign(_pid=lambda f: f["point_id"].astype(str))
    names = {pid: _name(row) for pid, (_, row) in zip(ok["_pid"], ok.iterrows(), strict=True)}
    ties = mark_ties(results)  # every ok point's ties; results.csv keeps them for frontier points
    for i, tie in results["frontier_tie_with"].items():
        if results.loc[i, "on_frontier"]:
            assert (None if pd.isna(tie) else tie) == ties[i]

    def tied(row: pd.Series) -> list[str]:
        value = ties[row.name]
        return [] if value is None or pd.isna(value) else str(value).split()

    fastest = ok.sort_values(["_tps", "_pid"], ascending=[False, True], kind="stable").iloc[0]
    least = ok.sort_values(["_mem", "_tps", "_pid"], ascending=[True, False, True], kind="stable").iloc[0]
    fast_tail = _tie_part(tied(fastest), names, "the 95 % confidence intervals of their median step times overlap")
    mems = dict(zip(ok["_pid"], ok["_mem"], strict=True))
    if tied(fastest):  # which of the points the measurement cannot tell apart to pick, and what to rerun
        rows = ok[ok["_pid"].isin([fastest["_pid"], *tied(fastest)])]
        front = rows[rows["on_frontier"].astype(bool)]
        pool = front if len(front) else rows
        pick = pool.sort_values(["_mem", "_tps", "_pid"], ascending=[True, False, True], kind="stable").iloc[0]
        steps = max(16, 2 * int(pd.to_numeric(rows["timed_steps_measured"]).max()))
        which = (
            "it, the least memory of them"
            if pick["_pid"] == fastest["_pid"]
            else f"{names[pick['_pid']]}, as fast within the intervals with the least memory of them"
        )
        fast_tail += (
            f": the measurements cannot tell them apart, so pick {which}; to tell them apart, rerun these points "
            f"with timed_steps={steps} (or timed_steps=auto)"
        )
    same = [t for t in tied(least) if mems.get(t) == least["_mem"]]
    least_tail = _tie_part(same, names, "same memory, overlapping ranges")
    # a verdict resting on a point measured under CPU contention (a loaded machine) says it is not certain
    contended = "contended" in ok.columns and ok["contended"].astype(str).eq("True").any()
    unsure = r"( \(not certain: [^;]* measured under CPU contention\))?" if contended else ""
    expected = (
        rf"Fastest: {re.escape(names[fastest['_pid']])} \([^()]*tokens/s per device[^()]*\){re.escape(fast_tail)}"
        rf"{unsure}; "
        rf"least memory: {re.escape(names[least['_pid']])} \([^()]*\){re.escape(least_tail)}[;.]"
    )
    assert re.search(expected, first), (expected, first)
    n_front = int(results["on_frontier"].astype(bool).sum())
    assert f"{len(results):,} points: {len(ok):,} ok ({n_front:,} on the frontier)" in first, first


def _png_size(path: Path) -> tuple[int, int]:
    """(width, height) in pixels of a PNG file, from its IHDR chunk."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", head[16:24])


def test_a_full_page_screenshot_is_saved(page, tmp_path):
    d = page["driver"]
    height, width = d.execute_script(
        "return [document.documentElement.scrollHeight, document.documentElement.clientWidth]"
    )
    shot = d.execute_cdp_cmd(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
        },
    )
    path = tmp_path / "report_full_page.png"
    path.write_bytes(base64.b64decode(shot["data"]))
    top = tmp_path / "report_first_screen.png"  # what a reader sees first, at the window's size
    assert d.save_screenshot(str(top))
    w, h = _png_size(path)
    assert w >= WINDOW[0] * 0.9 and h >= height * 0.99, (w, h, height)
    saved = [path, top]
    artifacts = os.environ.get("SWEEPER_TEST_ARTIFACTS")
    if artifacts:
        out = Path(artifacts)
        out.mkdir(parents=True, exist_ok=True)
        saved += [Path(shutil.copy2(p, out / p.name)) for p in (path, top)]
    for p in saved:
        print(f"report screenshot: {p}")
