"""``ckptlog serve`` in a real browser: headless Chromium from Debian's packages (``chromium``,
``chromium-driver``) driven by selenium. The tests pick an invocation, scrub its timeline, open
an instance and a diff, and read what is on screen; they also time the page on large logs.

Without the browser these tests skip with one line naming the install command; in CI
(``CI=true``, or ``CKPTLOG_REQUIRE_BROWSER=1`` as ``.ci/run`` sets after installing the
packages) they fail instead, so they never silently stop running.
``CKPTLOG_SCREENSHOT=1`` also writes the README's screenshot to ``docs/img/viewer.png``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from eventlog import serve
from tests.viewer_logs import (
    FAIL_EVERY,
    XSS_ID,
    XSS_KEY,
    build_big_fan_out,
    build_many_saves,
    build_mixed,
)

ROOT = Path(__file__).resolve().parent.parent
INSTALL = "apt-get update && apt-get install -y chromium chromium-driver"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
)


def _missing() -> str | None:
    try:
        import selenium  # noqa: F401, PLC0415
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    for binary in (CHROMIUM, CHROMEDRIVER):
        if not os.path.exists(binary):
            return f"{binary} is missing: install the browser with `{INSTALL}`"
    return None


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    why = _missing()
    if why is not None:
        if os.environ.get("CI", "").lower() == "true" or os.environ.get("CKPTLOG_REQUIRE_BROWSER"):
            pytest.fail(f"BROWSER TESTS CANNOT RUN IN CI: {why}")
        pytest.skip(f"BROWSER TESTS SKIPPED: {why}")
    from selenium import webdriver  # noqa: PLC0415
    from selenium.webdriver.chrome.service import Service  # noqa: PLC0415

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="ckptlog-chromium-")
    options.add_argument(f"--user-data-dir={profile}")
    d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    d.set_page_load_timeout(60)
    try:
        yield d
    finally:
        d.quit()
        shutil.rmtree(profile, ignore_errors=True)


def served(path: Path) -> serve.ViewerServer:
    server = serve.make_server(str(path), port=0)
    server.serve_in_thread()
    return server


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[serve.ViewerServer]:
    path = tmp_path_factory.mktemp("browser") / "mixed"
    build_mixed(path)
    server = served(path)
    yield server
    server.shutdown()
    server.server_close()


def wait(d: Any, cond: Callable[[Any], Any], timeout: float = 30, what: str = "") -> Any:
    from selenium.webdriver.support.ui import WebDriverWait  # noqa: PLC0415

    return WebDriverWait(d, timeout, poll_frequency=0.02).until(cond, what)


def text(d: Any, css: str) -> str:
    """The rendered text of the first element ``css`` selects (read in one step: the page
    replaces elements as it updates)."""
    got = d.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.innerText : ''", css
    )
    return str(got).strip()


def has_text(css: str, needle: str) -> Callable[[Any], bool]:
    return lambda d: needle in text(d, css)


def find(d: Any, css: str) -> Any:
    from selenium.webdriver.common.by import By  # noqa: PLC0415

    return d.find_element(By.CSS_SELECTOR, css)


def open_page(d: Any, server: serve.ViewerServer) -> None:
    d.get(server.url)
    wait(d, lambda d: d.execute_script("return document.body.dataset.ready") == "1")
    assert d.execute_script("return window.__ckptlogErrors || null") is None


def no_errors(d: Any) -> None:
    assert d.execute_script("return window.__ckptlogErrors || null") is None


def pick(d: Any, query: str, stream_id: str) -> None:
    box = find(d, "#search")
    box.clear()
    box.send_keys(query)
    row = f'#inv-list li[data-id="{json.dumps(stream_id)[1:-1]}"]'
    wait(d, lambda d: len(d.find_elements("css selector", "#inv-list li")) == 1, what=query)
    find(d, row).click()


def type_into(d: Any, css: str, value: str) -> None:
    from selenium.webdriver.common.keys import Keys  # noqa: PLC0415

    box = find(d, css)
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(value, Keys.TAB)  # leaving the field fires its change event


def test_pick_scrub_open_an_instance_and_a_diff(
    driver: Any, mixed: serve.ViewerServer, tmp_path: Path
) -> None:
    from selenium.webdriver.common.action_chains import ActionChains  # noqa: PLC0415

    d = driver
    open_page(d, mixed)
    assert "9 streams" in text(d, "#inv-count")
    pick(d, "job-1", "job-1")
    # the list's progress bar: 1,980 of 2,000 completed fill ~99% of it (styles pass the CSP)
    bar = d.execute_script(
        "const b = document.querySelector('#inv-list .bar');"
        "const w = (css) => b.querySelector(css).offsetWidth;"
        "return [w('.ok'), w('.bad'), b.offsetWidth]"
    )
    assert bar[0] >= 0.95 * bar[2]
    assert bar[1] >= 1
    wait(d, lambda d: find(d, "#detail").get_attribute("data-timeline") == "ready")
    assert "10 frames" in text(d, "#tl-status")
    assert "before seq 5" in text(d, ".pauses")  # the 30 s pause, marked
    wait(d, has_text("#rec-seq", "seq 10 of 10"))
    wait(d, has_text("#grid-info", "of 2,000"))
    # scrub: click a quarter of the way along the timeline
    chart = d.find_elements("css selector", "canvas.chart")[0]
    ActionChains(d).move_to_element_with_offset(
        chart, -chart.size["width"] // 4, 0
    ).click().perform()
    wait(d, lambda d: "seq 10 of 10" not in text(d, "#rec-seq"))
    assert not find(d, "#follow").is_selected()  # picking a seq stops following the latest
    # type a seq
    type_into(d, "#seq-input", "3")
    wait(d, has_text("#rec-seq", "seq 3 of 10"))
    wait(d, has_text("#grid-info", "of 2,000"))
    # the grid: zoom in by clicking cells until one instance opens
    grid = find(d, "#grid")
    for _ in range(6):
        if text(d, "#inst-title"):
            break
        before = text(d, "#grid-info")
        ActionChains(d).move_to_element_with_offset(
            grid, -grid.size["width"] // 2 + 3, -grid.size["height"] // 2 + 3
        ).click().perform()
        wait(d, lambda d, b=before: text(d, "#grid-info") != b or text(d, "#inst-title"))
    assert text(d, "#inst-title").startswith("instance 0: completed")
    # open a failed instance by number
    bad = FAIL_EVERY - 1
    type_into(d, "#inst-index", str(bad))
    wait(d, has_text("#inst-title", f"instance {bad}: completed (error)"))
    assert f"item {bad} timed out" in text(d, "#instance")
    # failures, in the order they failed
    wait(d, has_text("#failures", f"{2000 // FAIL_EVERY} failures"))
    first = text(d, "#failures tr:nth-child(2)").split()
    assert first[:2] == ["1", str(bad)]
    # a diff
    type_into(d, "#diff-a", "2")
    type_into(d, "#diff-b", "3")
    find(d, "#diff-go").click()
    wait(d, has_text("#diff-out", "job-1: seq 2 -> seq 3"))
    assert "~ work[" in text(d, "#diff-out")
    # the state tree: the top level is open
    assert '"phase"' in text(d, "#record")
    find(d, "#grid-out").click()  # the whole fan-out again
    wait(d, has_text("#grid-info", "instances 0..1,999 of 2,000"))
    d.set_window_size(1400, 1750)  # the timeline, the record, the grid and the instance
    d.execute_script("window.scrollTo(0, 0)")
    shot = tmp_path / "viewer.png"
    d.save_screenshot(str(shot))
    d.set_window_size(1400, 1000)
    no_errors(d)
    assert shot.stat().st_size > 20_000
    if os.environ.get("CKPTLOG_SCREENSHOT") == "1":
        (ROOT / "docs" / "img").mkdir(exist_ok=True)
        shutil.copy(shot, ROOT / "docs" / "img" / "viewer.png")


def test_an_id_holding_html_renders_as_text(driver: Any, mixed: serve.ViewerServer) -> None:
    d = driver
    open_page(d, mixed)
    pick(d, "<script>", XSS_ID)
    wait(d, has_text("#inv-title", "<script>"))
    assert text(d, "#inv-title") == XSS_ID
    assert text(d, "#inv-list li .inv-id") == XSS_ID
    wait(d, has_text("#record", XSS_KEY))
    assert "<script>x</script>" in text(d, "#record")
    assert d.execute_script("return window.__xss === undefined")
    assert d.execute_script("return document.querySelectorAll('img, b, i').length") == 0
    assert d.execute_script(
        "return [...document.scripts].every(s => s.src.endsWith('/static/app.js'))"
    )


def test_integrations_in_their_own_terms(driver: Any, mixed: serve.ViewerServer) -> None:
    from selenium.webdriver.support.ui import Select  # noqa: PLC0415

    d = driver
    open_page(d, mixed)
    Select(find(d, "#family")).select_by_value("langgraph")
    wait(d, lambda d: len(d.find_elements("css selector", "#inv-list li")) == 1)
    assert "LangGraph thread lg-thread · ns (root)" in text(d, "#inv-list")
    find(d, "#inv-list li").click()
    wait(d, has_text("#lg-tree", "fork: 2 branches"))
    assert "update" in text(d, "#lg-tree")
    wait(d, has_text("#lg-detail", "channel values"))
    nodes = d.find_elements("css selector", ".lg-node")
    assert len(nodes) >= 8
    nodes[-1].click()
    wait(d, has_text("#lg-detail", "pending writes"))
    Select(find(d, "#family")).select_by_value("techrevati")
    wait(d, has_text("#inv-list", "techrevati thread tr-1"))
    find(d, '#inv-list li[data-id="techrevati:tr-1"]').click()
    wait(d, has_text("#history", "step"))
    assert text(d, "#history").count("checkpoint") == 2
    Select(find(d, "#family")).select_by_value("apflow")
    wait(d, has_text("#inv-list", "apflow task task-1"))
    find(d, '#inv-list li[data-id="apflow:task-1"]').click()
    wait(d, has_text("#history", "delete"))
    assert "3 hidden" in text(d, "#history")
    no_errors(d)


def test_verify_and_stats(driver: Any, mixed: serve.ViewerServer) -> None:
    d = driver
    open_page(d, mixed)
    find(d, "#btn-verify").click()
    wait(d, has_text("#verify-status", "OK"), timeout=60)
    find(d, "#overlay-close").click()
    find(d, "#btn-stats").click()
    wait(d, has_text("#stats-table", "frames"))
    assert "streams\t9" in text(d, "#stats-table")
    no_errors(d)


WRITER = """
import sys, time
from eventlog.checkpoints import CheckpointLog
from tests.viewer_logs import fan_record
cl = CheckpointLog.open(sys.argv[1], durability="process")
for i in range(int(sys.argv[2])):
    cl.save("live", fan_record("live", 4))
    time.sleep(0.01)
cl.close()
"""


def test_the_page_follows_a_writer_in_another_process(driver: Any, tmp_path: Path) -> None:
    from eventlog.checkpoints import CheckpointLog  # noqa: PLC0415
    from tests.viewer_logs import fan_record  # noqa: PLC0415

    path = tmp_path / "live"
    with CheckpointLog.open(path, durability="process") as cl:
        cl.save("live", fan_record("live", 4))
    server = served(path)
    saves = 300
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    try:
        d = driver
        open_page(d, server)
        find(d, '#inv-list li[data-id="live"]').click()
        wait(d, has_text("#rec-seq", "seq 1 of 1"))
        with subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(saves)], env=env) as w:
            seen = set()
            while w.poll() is None:
                seen.add(text(d, "#rec-seq"))
                time.sleep(0.05)
            assert w.wait() == 0
        total = saves + 1
        wait(d, has_text("#rec-seq", f"seq {total:,} of {total:,}"))
        assert len(seen) >= 3  # it moved while the writer ran, without a reload
        no_errors(d)
    finally:
        server.shutdown()
        server.server_close()


# -- time to interactive on large logs ---------------------------------------------------------


def time_page(d: Any, server: serve.ViewerServer, stream: str) -> dict[str, float]:
    """Milliseconds from navigation to a usable page (the list shown, every control live), then
    from picking ``stream`` to its first chart, and to its timeline fully indexed."""
    d.get(server.url)
    wait(d, lambda d: d.execute_script("return document.body.dataset.ready") == "1", 60)
    ready = float(d.execute_script("return window.__ckptlogReady"))
    started = time.perf_counter()
    find(d, f'#inv-list li[data-id="{stream}"]').click()
    wait(d, lambda d: text(d, "#tl-status") and text(d, "#rec-seq"), 60)
    assert "Error" not in text(d, "#record"), text(d, "#record")
    first = (time.perf_counter() - started) * 1e3
    wait(d, lambda d: find(d, "#detail").get_attribute("data-timeline") == "ready", 120)
    full = (time.perf_counter() - started) * 1e3
    return {"page_ready_ms": ready, "first_chart_ms": first, "timeline_indexed_ms": full}


def report(name: str, figures: dict[str, float]) -> None:
    line = f"TIME-TO-INTERACTIVE {name}: " + ", ".join(f"{k} {v:,.0f}" for k, v in figures.items())
    print(line)  # shown with -s; also appended to the file below for the record
    out = os.environ.get("CKPTLOG_TTI_OUT")
    if out:
        with open(out, "a") as f:
            f.write(line + "\n")


# Stress tests (the repo's convention): smoke size by default, full size with --long.


def test_a_fork_says_where_it_came_from(driver: Any, tmp_path: Path) -> None:
    from eventlog.checkpoints import CheckpointLog  # noqa: PLC0415
    from tests.viewer_logs import fan_record, msgspec_replace  # noqa: PLC0415

    path = tmp_path / "forks"
    with CheckpointLog.open(path, durability="process") as cl:
        for step in range(3):
            cl.save("src", msgspec_replace(fan_record("src", 2), state={"step": step}))
        origin = cl.fork("src", at=2, new_invocation_id="src-fork")
    server = served(path)
    try:
        d = driver
        open_page(d, server)
        find(d, '#inv-list li[data-id="src-fork"]').click()
        wait(d, has_text("#forked-from", "forked from src@2"))
        assert origin.checksum.hex() in text(d, "#forked-from")
        find(d, '#inv-list li[data-id="src"]').click()
        wait(d, has_text("#rec-seq", "seq 3 of 3"))
        assert d.execute_script("return document.querySelector('#forked-from')") is None
        no_errors(d)
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
def test_large_fan_out_page(driver: Any, tmp_path: Path, long_run: bool) -> None:
    """A fan-out of 100,000 instances (1,000,000 with --long) saved with save_instance."""
    check_fan_out(driver, tmp_path, 1_000_000 if long_run else 100_000)


def check_fan_out(d: Any, tmp_path: Path, instances: int) -> None:
    path = tmp_path / "big"
    build_big_fan_out(path, instances)
    server = served(path)
    try:
        figures = time_page(d, server, "big")
        wait(d, has_text("#grid-info", f"of {instances:,}"), 60)
        assert f"{instances:,}" in text(d, ".legend")
        assert "before seq" in text(d, ".pauses")
        grid = find(d, "#grid")
        before = text(d, "#grid-info")
        grid.click()  # a cell in the middle: zooms in on its instances
        wait(d, lambda d: text(d, "#grid-info") != before)
        no_errors(d)
        report(f"{instances:,}-instance fan-out", figures)
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
def test_many_saves_page(driver: Any, tmp_path: Path, long_run: bool) -> None:
    """One invocation with 100,000 saves (1,000,000 with --long)."""
    saves = 1_000_000 if long_run else 100_000
    path = tmp_path / "many"
    build_many_saves(path, saves)
    server = served(path)
    try:
        figures = time_page(driver, server, "many")
        wait(driver, has_text("#rec-seq", f"seq {saves:,} of {saves:,}"))
        assert f"{saves:,} frames" in text(driver, "#tl-status")
        assert f"before seq {saves // 2 + 1:,}" in text(driver, ".pauses")
        no_errors(driver)
        report(f"{saves:,} saves", figures)
    finally:
        server.shutdown()
        server.server_close()
