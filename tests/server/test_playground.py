"""The playground page in a real headless Chromium: it loads, lists voices, streams a synthesis through the
server, plays it with Web Audio, and reports exactly the audio length the runtime made."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import httpx
import pytest

from cdp_pipe import Browser, chromium
from serverkit import LiveServer, in_process, shared_runtime

CHROMIUM = chromium()
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (scripts/setup.sh installs it "
                                                         "with apt-get when run as root)")
STATE = ("JSON.stringify({state: document.getElementById('status').dataset.state, "
         "text: document.getElementById('status').textContent, "
         "seconds: Number(document.getElementById('audio-seconds').dataset.seconds), "
         "played: Number(document.getElementById('audio-seconds').dataset.played || 0), "
         "reads: Number(document.getElementById('reads').textContent), "
         "ttfa: document.getElementById('ttfa').textContent, "
         "voices: document.getElementById('voice').options.length})")


@pytest.fixture(scope="module")
def live():
    with LiveServer(shared_runtime()) as server:
        yield server


@pytest.fixture(scope="module")
def browser():
    b = Browser(CHROMIUM)
    yield b
    b.close()


def test_the_page_is_served_with_its_script(live):
    page = httpx.get(live.url + "/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'id="speak"' in page.text and "/static/playground.js" in page.text
    script = httpx.get(live.url + "/static/playground.js")
    assert script.status_code == 200 and "/v1/audio/speech" in script.text


@pytest.mark.parametrize("fmt", ["pcm", "mp3"])
def test_the_page_streams_a_synthesis_and_reports_its_length(live, browser, fmt):
    text, seed, frames = "Hello from the playground.", 8, 24
    want = in_process(shared_runtime(), text=text, seed=seed, max_frames=frames).metrics.audio_seconds
    query = urlencode({"text": text, "format": fmt, "seed": seed, "max_frames": frames, "autorun": 1})
    session = browser.open(f"{live.url}/?{query}")
    done = browser.wait_for(session, "['done', 'error'].includes(document.getElementById('status').dataset.state)",
                            timeout=60)
    state = json.loads(browser.evaluate(session, STATE))
    assert done and state["state"] == "done", state
    # pcm: the runtime's samples, all of them; mp3: as the browser's decoder trims the encoder's delay
    assert state["seconds"] == pytest.approx(want, abs=1e-6 if fmt == "pcm" else 0.03), state
    assert state["ttfa"].endswith("ms") and state["voices"] > 1  # first audio shown; the voice list loaded
    if fmt == "pcm":
        assert state["reads"] >= 2  # it arrived in pieces, as a stream
        assert state["played"] == pytest.approx(want, abs=1e-4)  # and every piece went to Web Audio
