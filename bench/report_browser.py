"""Open report.html in headless Chromium and check it as a reader would see it.

    python bench/report_browser.py [REPORT_HTML] [--screenshot PNG] [--full_page]

Without REPORT_HTML, a report is first built from small synthetic inputs (two models, both
sets, refusal kinds, a provenance file) into a temporary folder. Chromium (Debian package
``chromium``) is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``, no
port, no network): the page is loaded from disk, then the script reads from inside the page how
many images there are and whether each decoded (``naturalWidth > 0``), whether any resource
other than ``data:`` URIs was requested, the page's size and section headings, and every console
message, exception and log entry of level error. It saves a screenshot and prints what it found.
Exit 0 when the page rendered, every image loaded, nothing was fetched and no error was logged;
1 otherwise; 2 when Chromium is missing.
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
         "--hide-scrollbars", "--remote-debugging-pipe"]
PROBE = """JSON.stringify({
  title: document.title,
  images: Array.from(document.images).map(i => ({alt: i.alt, complete: i.complete, width: i.naturalWidth,
                                                  height: i.naturalHeight, data: i.src.startsWith('data:')})),
  fetched: performance.getEntriesByType('resource').map(r => r.name).filter(n => !n.startsWith('data:')),
  headings: Array.from(document.querySelectorAll('h2')).map(h => h.textContent),
  tables: document.querySelectorAll('table').length,
  examples: document.querySelectorAll('table.ex tbody tr').length,
  height: document.documentElement.scrollHeight,
  text: document.body ? document.body.innerText.length : 0
})"""


def _high(fd: int) -> int:
    """``fd`` moved to a descriptor number of at least 10 (the original is closed)."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return moved


class DevTools:
    """The DevTools protocol over Chromium's pipe: JSON messages ended by a NUL byte."""

    def __init__(self, binary: str, profile: str):
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        # Chromium's ends move to numbers >= 10, clear of the 3 and 4 they must become.
        to_chrome_r, from_chrome_w = (_high(fd) for fd in (to_chrome_r, from_chrome_w))

        self.log = tempfile.TemporaryFile()
        # The child reads commands on fd 3 and writes replies on fd 4; the shell puts the pipe
        # ends there (whatever numbers they have here) and then becomes Chromium.
        redirect = f'exec "$0" "$@" 3<&{to_chrome_r} 4>&{from_chrome_w} {to_chrome_r}<&- {from_chrome_w}>&-'
        self.proc = subprocess.Popen(["bash", "-c", redirect, binary, *FLAGS, f"--user-data-dir={profile}",
                                      "--window-size=1280,900", "about:blank"],
                                     pass_fds=(to_chrome_r, from_chrome_w), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=self.log)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._next, self._buffer, self.events = 0, b"", []

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 30) -> dict:
        self._next += 1
        msg = {"id": self._next, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        try:
            os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        except BrokenPipeError:
            raise RuntimeError(f"Chromium exited: {self.log_tail()}") from None
        while True:
            reply = self._read(timeout)
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 30) -> dict:
        for i, event in enumerate(self.events):
            if event.get("method") == method:
                return self.events.pop(i)
        while True:
            event = self._read(timeout)
            if event.get("method") == method:
                return event
            self.events.append(event)

    def _read(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_chrome], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                raise RuntimeError(f"Chromium closed the pipe: {self.log_tail()}")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def log_tail(self) -> str:
        """The last lines Chromium wrote on stderr."""
        self.log.seek(0)
        return " | ".join(self.log.read().decode(errors="replace").strip().splitlines()[-3:])

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_chrome)
        os.close(self._from_chrome)
        self.log.close()


def errors_in(events: list[dict]) -> list[str]:
    """Console errors, uncaught exceptions and error-level log entries among the protocol events."""
    found = []
    for e in events:
        method, params = e.get("method"), e.get("params", {})
        if method == "Runtime.exceptionThrown":
            found.append("exception: " + params.get("exceptionDetails", {}).get("text", ""))
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            words = (str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            found.append("console: " + " ".join(words))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            found.append(f"log: {params['entry'].get('text', '')} {params['entry'].get('url', '')}".strip())
    return found


def find_chromium() -> str | None:
    """The Chromium executable itself (Debian's /usr/bin/chromium is a launcher script whose
    sourced settings disturb the pipe's file descriptors), else whatever is on PATH."""
    for path in ("/usr/lib/chromium/chromium",):
        if os.access(path, os.X_OK):
            return path
    return shutil.which("chromium") or shutil.which("chromium-browser")


def check(html: Path, screenshot: Path, full_page: bool = False, binary: str | None = None) -> dict:
    """Load ``html`` in headless Chromium; what the page holds, its errors, and a screenshot."""
    binary = binary or find_chromium()
    if not binary:
        raise FileNotFoundError("chromium not found: apt-get update && apt-get install -y chromium")
    with tempfile.TemporaryDirectory(prefix="orbench-chromium-") as profile:
        tools = DevTools(binary, profile)
        try:
            target = tools.send("Target.createTarget", {"url": "about:blank"})["targetId"]
            session = tools.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Page", "Runtime", "Log"):
                tools.send(f"{domain}.enable", session=session)
            tools.send("Emulation.setDeviceMetricsOverride", {"width": 1280, "height": 1400,
                                                              "deviceScaleFactor": 1, "mobile": False}, session=session)
            started = time.monotonic()
            tools.send("Page.navigate", {"url": html.resolve().as_uri()}, session=session)
            tools.wait_for("Page.loadEventFired", timeout=60)
            load_s = time.monotonic() - started
            probe = json.loads(tools.send("Runtime.evaluate", {"expression": PROBE, "returnByValue": True},
                                          session=session)["result"]["value"])
            shot = {"format": "png", "captureBeyondViewport": full_page}
            if full_page:
                shot["clip"] = {"x": 0, "y": 0, "width": 1280, "height": min(probe["height"], 16000), "scale": 1}
            data = tools.send("Page.captureScreenshot", shot, session=session, timeout=60)["data"]
            screenshot.write_bytes(base64.b64decode(data))
            time.sleep(0.2)  # late console messages
            tools.send("Runtime.evaluate", {"expression": "1"}, session=session)
        finally:
            tools.close()
    probe.update(load_seconds=round(load_s, 2), errors=errors_in(tools.events), screenshot=str(screenshot),
                 html_bytes=html.stat().st_size)
    return probe


def sample_report(folder: Path) -> Path:
    """Build a report from small synthetic inputs (two models, both sets) and return report.html."""
    import numpy as np
    import pandas as pd

    from orbench.analysis.report import build as report
    from orbench.benchmark.datasets import data_path
    from orbench.scoring.vocab import SOURCE_KEYWORD

    rng = np.random.default_rng(1)
    for set_file, rate in (("or-bench-hard-1k", (0.15, 0.55)), ("or-bench-toxic", (0.8, 0.97))):
        prompts = pd.read_csv(data_path(f"{set_file}.csv")).groupby("category").head(12)
        for model, p in zip(("prov/model-a", "prov/model-b"), rate):
            rej = rng.random(len(prompts)) < p
            frame = prompts.assign(
                model=model, response=np.where(rej, "I'm sorry, but I can't help with <that> & won't.",
                                               "Sure - here is a careful, factual answer."),
                is_rejected=np.where(rej, "True", "False"), refusal_source=np.where(rej, SOURCE_KEYWORD, ""),
                refusal_kind=np.where(rej, np.where(rng.random(len(prompts)) < 0.2, "partial", "full"), ""),
                finish_reason="stop", error="")
            path = folder / f"{model.split('/')[1]}_{set_file}_alignment.csv"
            frame.to_csv(path, index=False)
            path.with_name(path.name + ".meta.json").write_text(json.dumps({
                "stage": "check_alignment", "package_version": "0.1.0",
                "models": [{"typed": model, "resolved": model, "provider": "prov"}],
                "rules_fingerprint": "sample", "settings": {"temperature": 0.0},
                "counts": {"rows": len(frame), "done": len(frame), "errors": 0}}))
    rep = report.build_report([str(folder / "*_alignment.csv")], folder / "report")
    return rep.outputs["html"]


def main(argv=None) -> int:
    """Check one report.html (or a freshly built sample) in headless Chromium; print the findings."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("html", nargs="?", help="the report.html to check (default: build a sample report)")
    parser.add_argument("--screenshot", default=None, help="where to save the PNG (default: beside the HTML)")
    parser.add_argument("--full_page", action="store_true", help="capture the whole page, not the first screen")
    args = parser.parse_args(argv)
    tmp = None
    if args.html:
        html = Path(args.html)
        if not html.is_file():
            print(f"error: no such file: {html}", file=sys.stderr)
            return 2
    else:
        tmp = Path(tempfile.mkdtemp(prefix="orbench-report-sample-"))
        html = sample_report(tmp)
    shot = Path(args.screenshot) if args.screenshot else html.with_name("report_screenshot.png")
    try:
        found = check(html, shot, args.full_page)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    images = found["images"]
    broken = [i["alt"] for i in images if not (i["complete"] and i["width"] > 0)]
    print(f"page: {html} ({found['html_bytes'] / 1024:.0f} KiB), loaded in {found['load_seconds']} s, "
          f"title {found['title']!r}, {found['height']} px tall, {found['text']:,} characters of text")
    print(f"sections: {', '.join(found['headings'])}")
    print(f"tables: {found['tables']}, example rows: {found['examples']}")
    print(f"images: {len(images)}, decoded: {len(images) - len(broken)} "
          + ", ".join(f"{i['alt']!r} {i['width']}x{i['height']}{' (data URI)' if i['data'] else ''}" for i in images))
    print(f"requests other than data: URIs: {len(found['fetched'])} {found['fetched'][:5]}")
    print(f"console errors: {len(found['errors'])} {found['errors'][:5]}")
    print(f"screenshot: {found['screenshot']}")
    ok = found["text"] > 0 and images and not broken and not found["fetched"] and not found["errors"] \
        and all(i["data"] for i in images)
    print("result: " + ("OK" if ok else "PROBLEMS FOUND"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
