"""Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe: JSON messages
separated by NUL on fds 3 and 4), so the browser test needs no client library and no debugging port."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from typing import Any

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--autoplay-policy=no-user-gesture-required", "--remote-debugging-pipe"]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    def __init__(self, executable: str) -> None:
        self._profile = tempfile.mkdtemp(prefix="v2-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def fds() -> None:  # the browser reads commands on fd 3 and answers on fd 4
            a, b = os.dup(to_browser_r), os.dup(from_browser_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen([executable, *FLAGS, f"--user-data-dir={self._profile}", "about:blank"],
                                     preexec_fn=fds, close_fds=False, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer, self._next_id = b"", 0

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:  # events and other answers are skipped
            while b"\0" not in self._buffer:
                data = os.read(self._from_browser, 1 << 16)
                if not data:
                    raise RuntimeError("the browser closed its DevTools pipe")
                self._buffer += data
            line, self._buffer = self._buffer.split(b"\0", 1)
            reply = json.loads(line)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def open(self, url: str) -> str:
        """A new tab at `url`; its session id."""
        target = self.call("Target.createTarget", url=url)["targetId"]
        return self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def evaluate(self, session: str, expression: str) -> Any:
        return self.call("Runtime.evaluate", session, expression=expression, returnByValue=True)["result"].get("value")

    def evaluate_async(self, session: str, expression: str) -> Any:
        """The value a JS promise settles to."""
        result = self.call("Runtime.evaluate", session, expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"the page threw: {result['exceptionDetails'].get('text')} "
                               f"{result['result'].get('description', '')}")
        return result["result"].get("value")

    def set_files(self, session: str, selector: str, paths: list[str]) -> None:
        """Choose files in a file input, as a user picking them would (the page gets its change event)."""
        root = self.call("DOM.getDocument", session)["root"]["nodeId"]
        node = self.call("DOM.querySelector", session, nodeId=root, selector=selector)["nodeId"]
        self.call("DOM.setFileInputFiles", session, files=paths, nodeId=node)

    def wait_for(self, session: str, expression: str, timeout: float) -> Any:
        """Poll a JS expression until it is truthy; its value."""
        deadline = time.time() + timeout
        while True:
            value = self.evaluate(session, expression)
            if value or time.time() > deadline:
                return value
            time.sleep(0.05)

    def close(self) -> None:
        try:
            self.call("Browser.close")
            self.proc.wait(10)
        except (RuntimeError, OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait(10)
        finally:
            os.close(self._to_browser)
            os.close(self._from_browser)
            shutil.rmtree(self._profile, ignore_errors=True)
