"""Headless Chromium driven over the DevTools protocol (websocket-client), with the network off.

Used by the report's browser test, and as a script to take the README's screenshot:

    python tests/helpers/cdp_browser.py report.html docs/report.png

The browser is Debian's `chromium` (or any Chromium on PATH); nothing is downloaded. The network is
off three ways: every host name resolves to nothing (--host-resolver-rules), every connection goes
to a proxy that does not exist, and the page's network is emulated offline. Every request the page
makes is recorded, so a test can check that a file:// page fetched nothing else.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import websocket

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")


def find_browser() -> str | None:
    env = os.environ.get("CHROMIUM")
    if env:
        return env
    for name in BROWSERS:
        p = shutil.which(name)
        if p:
            return p
    return None


class Browser:
    """One headless browser with one page; `open(path)` loads a local file and waits for it."""

    def __init__(self, width: int = 1400, height: int = 1000, timeout: float = 60.0):
        exe = find_browser()
        if exe is None:
            raise RuntimeError("no Chromium on PATH (apt-get install chromium)")
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="cdp-profile-")
        args = [
            exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
            "--no-default-browser-check", "--disable-extensions", "--disable-background-networking", "--disable-sync",
            "--disable-component-update", "--disable-default-apps", "--mute-audio", "--hide-scrollbars",
            "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
            f"--window-size={width},{height}", "--remote-debugging-port=0", "--remote-allow-origins=*",
            f"--user-data-dir={self.profile}", "about:blank",
        ]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        port = self._port()
        self.ws = websocket.create_connection(self._page_ws(port), timeout=timeout, suppress_origin=True)
        self._id = 0
        self.events: list[dict] = []
        for m in ("Page.enable", "Runtime.enable", "Log.enable", "Network.enable"):
            self.call(m)
        self.call("Network.emulateNetworkConditions", offline=True, latency=0, downloadThroughput=-1, uploadThroughput=-1)
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def _port(self) -> int:
        f = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}: {self.proc.stderr.read().decode(errors='replace')[-2000:]}")
            if f.exists():
                lines = f.read_text().split()
                if lines:
                    return int(lines[0])
            time.sleep(0.05)
        raise RuntimeError("chromium did not open its DevTools port")

    def _page_ws(self, port: int) -> str:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:  # loopback only
                pages = [t for t in json.load(r) if t.get("type") == "page"]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
            time.sleep(0.05)
        raise RuntimeError("chromium has no page target")

    def call(self, method: str, **params):
        self._id += 1
        mid = self._id
        self.ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == mid:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def wait_event(self, method: str, timeout: float | None = None) -> dict:
        for e in self.events:
            if e["method"] == method:
                self.events.remove(e)
                return e
        deadline = time.monotonic() + (timeout or self.timeout)
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv())
            if "method" in msg:
                if msg["method"] == method:
                    return msg
                self.events.append(msg)
        raise TimeoutError(method)

    def open(self, path: Path, fragment: str | None = None) -> str:
        """Load a local file (at `#fragment` when given, as a permalink opens it); returns its URL."""
        url = Path(path).resolve().as_uri() + (f"#{fragment}" if fragment else "")
        self.events.clear()
        self.call("Page.navigate", url=url)
        self.wait_event("Page.loadEventFired")
        return url

    def eval(self, expression: str):
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression!r}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def settle(self, seconds: float = 0.3) -> None:
        """Let the page run (and its events arrive) for a moment."""
        self.eval(f"new Promise(r => setTimeout(r, {int(seconds * 1000)}))")

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries seen so far."""
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.exceptionThrown":
                d = p["exceptionDetails"]
                out.append(f"exception: {d.get('exception', {}).get('description') or d.get('text')}")
            elif e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console.error: " + " ".join(str(a.get("value", a.get("description"))) for a in p.get("args", [])))
            elif e["method"] == "Log.entryAdded" and p["entry"].get("level") == "error":
                out.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}")
        return out

    def requests(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"]

    def screenshot(self, out: Path) -> None:
        h = self.eval("Math.ceil(document.documentElement.scrollHeight)")
        w = self.eval("Math.ceil(document.documentElement.scrollWidth)")
        r = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                      clip={"x": 0, "y": 0, "width": w, "height": h, "scale": 1})
        Path(out).write_bytes(base64.b64decode(r["data"]))

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc.stderr.close()
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: python tests/helpers/cdp_browser.py PAGE.html OUT.png [HASH]", file=sys.stderr)
        return 2
    with Browser(width=1400, height=900) as b:
        b.open(Path(argv[0]))
        if len(argv) == 3:
            b.eval(f"location.hash = {json.dumps(argv[2])}")
        b.settle(1.0)
        b.eval("window.scrollTo(0, 0)")
        errs = b.errors()
        if errs:
            print("\n".join(errs), file=sys.stderr)
            return 1
        b.screenshot(Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
