"""How long the leaderboard site takes to open with many models (goal: under 1 s for 100).

    python bench/leaderboard_open.py [--models 100] [--repeat 5] [--folder DIR]

Writes ``--models`` synthetic stage-4 outputs on the whole of Hard-1K and Toxic (the bundled
prompts and categories; five providers; refusal rates spread across models), runs the report over
them (tables only, with the Every Eval Ever records and their per-sample files, so the site has
per-prompt verdicts for its adjacent-rank tests), builds the site from the report folder, and opens
``index.html`` from disk in headless Chromium ``--repeat`` times. Printed: the report's and the
build's seconds, the size of ``data.js``, and per opening the milliseconds from the start of the
navigation to the page drawn (``window.ORBENCH_DRAWN_MS``: the first frame after the plot and the
table were built) and to the load event, then the time one filter (the set) takes to rebuild and
lay out the table, measured inside the page. Needs Debian's
``chromium`` and ``chromedriver`` and Selenium.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--allow-file-access-from-files", "--window-size=1280,1000")


def make_inputs(folder: Path, models: int) -> list[Path]:
    """Stage-4-shaped outputs of ``models`` models on every Hard-1K and Toxic prompt (reused when there)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    paths = []
    for name, low, high in (("or-bench-hard-1k", 0.02, 0.9), ("or-bench-toxic", 0.4, 1.0)):
        prompts = pd.read_csv(ROOT / "orbench" / "data" / f"{name}.csv", dtype=str, keep_default_na=False)
        for m in range(models):
            path = folder / f"{name}_model-{m:03d}.csv"
            paths.append(path)
            if path.exists():
                continue
            refused = rng.random(len(prompts)) < low + (high - low) * m / max(1, models - 1)
            pd.DataFrame({"prompt": prompts["prompt"], "category": prompts["category"],
                          "model": f"prov{m % 5}/model-{m:03d}",
                          "response": np.where(refused, "I'm sorry, but I can't help with that.",
                                               "Sure, here is an overview of the topic."),
                          "is_rejected": np.where(refused, "True", "False"), "finish_reason": "stop",
                          "error": ""}).to_csv(path, index=False)
    return paths


def run(*args: str) -> float:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=dict(os.environ, MPLBACKEND="Agg"))
    if proc.returncode != 0:
        raise SystemExit(f"{args[0]} failed (exit {proc.returncode}): {proc.stderr.strip()[-800:]}")
    return time.perf_counter() - started


#: Resolves with the page's first frame after it was built (ms since the navigation began).
WAIT_DRAWN = """var done = arguments[arguments.length - 1];
(function poll() { if (window.ORBENCH_DRAWN_MS) { done(window.ORBENCH_DRAWN_MS); } else { setTimeout(poll, 5); } })();"""
#: One filter (the set) chosen inside the page: the table rebuilt and laid out, in ms.
REFILTER = """var t = performance.now(), select = document.getElementById('f-set');
select.value = 'toxic'; select.dispatchEvent(new Event('change'));
void document.body.offsetHeight; return performance.now() - t;"""


def open_times(page: Path, repeat: int) -> tuple[list[float], list[float], list[float]]:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if not (chromium and driver_path):
        raise SystemExit("needs Debian's chromium and chromedriver (apt-get install chromium chromium-driver)")
    profile = tempfile.mkdtemp(prefix="orbench-bench-chromium-")
    opts = Options()
    opts.binary_location = chromium
    for arg in (*FLAGS, f"--user-data-dir={profile}"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(driver_path), options=opts)
    ready, loaded, refilter = [], [], []
    try:
        for _ in range(repeat):
            driver.get("about:blank")
            driver.get(page.as_uri())
            ready.append(driver.execute_async_script(WAIT_DRAWN))
            loaded.append(driver.execute_script("return performance.getEntriesByType('navigation')[0].loadEventEnd"))
            refilter.append(driver.execute_script(REFILTER))
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
    return ready, loaded, refilter


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, default=100, help="models on the site (default: 100)")
    parser.add_argument("--repeat", type=int, default=5, help="openings measured (default: 5)")
    parser.add_argument("--folder", default=None, help="where the synthetic inputs, report and site go (kept)")
    args = parser.parse_args(argv)
    folder = Path(args.folder or Path(tempfile.gettempdir()) / f"orbench_leaderboard_open_{args.models}")
    inputs = make_inputs(folder / "inputs", args.models)
    report_s = run(str(ROOT / "analysis" / "report.py"), *map(str, inputs), "--output_dir", str(folder / "report"),
                   "--no_figures", "--examples", "0")
    build_s = run(str(ROOT / "analysis" / "leaderboard.py"), str(folder / "report"), "--output_dir", str(folder / "site"))
    page = folder / "site" / "index.html"
    ready, loaded, refilter = open_times(page, args.repeat)
    size = (folder / "site" / "data.js").stat().st_size / 2**20
    print(f"{args.models} models, {2 * args.models} cells of Hard-1K and Toxic ({len(inputs)} inputs): report "
          f"{report_s:.1f} s, site build {build_s:.1f} s, data.js {size:.2f} MB")
    print(f"open to drawn (ms): median {statistics.median(ready):.0f}, max {max(ready):.0f} "
          f"({', '.join(f'{x:.0f}' for x in ready)}); load event: median {statistics.median(loaded):.0f}")
    print(f"set filter redraw (ms): median {statistics.median(refilter):.0f}, max {max(refilter):.0f}")
    print(f"goal: under 1000 ms to drawn: {'met' if max(ready) < 1000 else 'NOT met'}  (load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
