"""The playground page in a real headless Chromium: it loads, lists voices, streams a synthesis through the
server, plays it with Web Audio, reports exactly the audio length the runtime made, then offers the whole
audio (player, download with the format's file name, waveform); its sampling knobs reach the runtime; a
reference recording chosen in the file input clones, is saved as a voice, listed, spoken with and deleted."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from urllib.parse import urlencode

import httpx
import numpy as np
import pytest
import soundfile as sf

from cdp_pipe import Browser, chromium
from serverkit import CARD, LiveServer, in_process
from v2.runtime import Runtime
from v2.server.audio import to_s16

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
RESULT = ("JSON.stringify({shown: !document.getElementById('result').hidden, "
          "player: document.getElementById('player').src, href: document.getElementById('download').href, "
          "name: document.getElementById('download').download})")
PIXELS = ("(() => { const c = document.getElementById('waveform'); "
          "const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0; "
          "for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; "
          "return {painted: n, width: c.width, drawn: c.dataset.drawn}; })()")
DOWNLOAD = ("fetch(document.getElementById('download').href).then(r => r.arrayBuffer()).then(b => { "
            "const u = new Uint8Array(b); let s = ''; "
            "for (let i = 0; i < u.length; i += 32768) s += String.fromCharCode.apply(null, u.subarray(i, i + 32768)); "
            "return btoa(s); })")
# every body the page sends to the speech route, kept in window.sent
CAPTURE = ("window.sent = []; const real = window.fetch; window.fetch = (url, init) => { "
           "if (String(url).endsWith('/v1/audio/speech')) window.sent.push(JSON.parse(init.body)); "
           "return real(url, init); }; true")


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    """The tiny card with a voice store of its own, so saved voices stay in this test's folder."""
    with Runtime.from_card(CARD, voices_dir=str(tmp_path_factory.mktemp("voices"))) as rt:
        yield rt


@pytest.fixture(scope="module")
def live(runtime):
    with LiveServer(runtime) as server:
        yield server


@pytest.fixture(scope="module")
def browser():
    b = Browser(CHROMIUM)
    yield b
    b.close()


def open_page(browser: Browser, url: str) -> str:
    session = browser.open(url)
    assert browser.wait_for(session, "document.getElementById('page') && "
                                     "document.getElementById('page').dataset.ready === '1'", timeout=30)
    return session


def speak(browser: Browser, session: str) -> dict:
    """Press Speak and wait for the request to end; the page's state then."""
    browser.evaluate(session, "document.getElementById('speak').click()")
    browser.wait_for(session, "['done', 'error'].includes(document.getElementById('status').dataset.state)",
                     timeout=60)
    state = json.loads(browser.evaluate(session, STATE))
    assert state["state"] == "done", state
    return state


def downloaded(browser: Browser, session: str) -> bytes:
    return base64.b64decode(browser.evaluate_async(session, DOWNLOAD))


def pcm48(result) -> bytes:
    """What `pcm` at 48 kHz carries: the channel mean as s16le."""
    return to_s16(result.audio.mean(axis=0)).astype("<i2").tobytes()


def set_value(browser: Browser, session: str, element: str, value: object) -> None:
    browser.evaluate(session, f"document.getElementById({json.dumps(element)}).value = {json.dumps(str(value))}")


def test_the_page_is_served_with_its_scripts(live):
    page = httpx.get(live.url + "/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'id="speak"' in page.text and "/static/playground.js" in page.text
    script = httpx.get(live.url + "/static/playground.js")
    assert script.status_code == 200 and "/v1/audio/speech" in script.text
    for module in ("audio.js", "voices.js", "util.js"):  # the modules it imports, as the browser asks for them
        r = httpx.get(f"{live.url}/static/{module}")
        assert r.status_code == 200 and "javascript" in r.headers["content-type"], module


@pytest.mark.parametrize("fmt", ["pcm", "wav", "mp3"])
def test_the_page_streams_a_synthesis_and_offers_the_whole_audio(live, runtime, browser, fmt):
    text, seed, frames = "Hello from the playground.", 8, 24
    want = in_process(runtime, text=text, seed=seed, max_frames=frames)
    query = urlencode({"text": text, "format": fmt, "seed": seed, "max_frames": frames, "autorun": 1})
    session = open_page(browser, f"{live.url}/?{query}")
    done = browser.wait_for(session, "['done', 'error'].includes(document.getElementById('status').dataset.state)",
                            timeout=60)
    state = json.loads(browser.evaluate(session, STATE))
    assert done and state["state"] == "done", state
    seconds = want.metrics.audio_seconds
    # pcm, wav: the runtime's samples, all of them; mp3: as the browser's decoder trims the encoder's delay
    assert state["seconds"] == pytest.approx(seconds, abs=1e-6 if fmt != "mp3" else 0.03), state
    assert state["ttfa"].endswith("ms") and state["voices"] > 1  # first audio shown; the voice list loaded
    if fmt != "mp3":
        assert state["reads"] >= 2  # it arrived in pieces, as a stream
        assert state["played"] == pytest.approx(seconds, abs=1e-4)  # and every piece went to Web Audio
    result = json.loads(browser.evaluate(session, RESULT))
    assert result["shown"] and result["player"].startswith("blob:") and result["href"].startswith("blob:"), result
    assert result["name"] == f"speech.{fmt}"
    pixels = browser.evaluate(session, PIXELS)
    assert pixels["drawn"] == "1" and pixels["painted"] > pixels["width"], pixels  # more than a flat line
    file = downloaded(browser, session)
    if fmt == "pcm":
        assert file == pcm48(want)
    elif fmt == "wav":  # a whole file: the streamed header's open sizes filled in
        samples, rate = sf.read(io.BytesIO(file), dtype="int16")
        assert rate == want.sample_rate and np.array_equal(samples, to_s16(want.audio.T))
    else:  # the very file the server sends for this request (the page asks for it whole: stream false)
        body = {"input": text, "seed": seed, "max_frames": frames, "response_format": "mp3", "stream": False}
        assert file == httpx.post(live.url + "/v1/audio/speech", json=body, timeout=60).content


def test_the_sampling_knobs_reach_the_runtime(live, runtime, browser):
    text = "Knobs turned."
    session = open_page(browser, live.url + "/")
    browser.evaluate(session, CAPTURE)
    knobs = {"seed": 5, "max-frames": 20, "temperature": 0.7, "top-p": 0.9, "top-k": 20, "repetition-penalty": 1.1}
    for element, value in {"text": text, "format": "pcm", **knobs}.items():
        set_value(browser, session, element, value)
    speak(browser, session)
    sent = browser.evaluate(session, "window.sent")
    assert len(sent) == 1
    assert {k: sent[0][k] for k in ("seed", "max_frames", "temperature", "top_p", "top_k", "repetition_penalty")} \
        == {"seed": 5, "max_frames": 20, "temperature": 0.7, "top_p": 0.9, "top_k": 20, "repetition_penalty": 1.1}
    sampling = {"audio": {"temperature": 0.7, "top_p": 0.9, "top_k": 20}, "repetition_penalty": 1.1}
    want = in_process(runtime, text=text, seed=5, max_frames=20, sampling=sampling)
    card_default = in_process(runtime, text=text, seed=5, max_frames=20)
    file = downloaded(browser, session)
    assert file == pcm48(want) and file != pcm48(card_default)  # spoken with the knobs, not the card's settings
    set_value(browser, session, "top-k", 2.5)  # a bad value: the server's error, naming the field, on the page
    browser.evaluate(session, "document.getElementById('speak').click()")
    assert browser.wait_for(session, "document.getElementById('status').dataset.state === 'error'", timeout=30)
    assert "(top_k)" in browser.evaluate(session, "document.getElementById('status').textContent")


def test_a_reference_recording_clones_is_saved_listed_spoken_with_and_deleted(live, runtime, browser, tmp_path):
    recording = in_process(runtime, text="A voice to keep.", seed=3, max_frames=12)
    path = Path(tmp_path) / "playground-voice.wav"
    sf.write(path, recording.audio.T, recording.sample_rate, format="WAV", subtype="PCM_16")
    wav, name, words, text = path.read_bytes(), "playground-voice", "A voice to keep.", "Spoken in a kept voice."
    session = open_page(browser, live.url + "/")
    browser.evaluate(session, CAPTURE)
    browser.set_files(session, "#ref-file", [str(path)])
    assert browser.wait_for(session, "document.getElementById('use-ref').checked", timeout=10)
    assert browser.evaluate(session, "document.getElementById('voice-name').value") == name  # from the file name
    for element, value in {"text": text, "format": "pcm", "seed": 6, "max-frames": 16, "ref-text": words}.items():
        set_value(browser, session, element, value)

    speak(browser, session)  # cloned from the recording
    sent = browser.evaluate(session, "window.sent")[-1]
    head, _, data = sent["ref_audio"].partition(",")
    assert head == "data:audio/wav;base64" and base64.b64decode(data) == wav
    assert sent["ref_text"] == words and "voice" not in sent
    cloned = in_process(runtime, text=text, reference_audio=wav, reference_text=words, seed=6, max_frames=16)
    assert downloaded(browser, session) == pcm48(cloned)

    browser.evaluate(session, "document.getElementById('save-voice').click()")
    assert browser.wait_for(session, "['saved', 'error'].includes(document.getElementById('voice-status').dataset"
                                     ".state) && document.getElementById('voice-status').dataset.state", 60) == "saved"
    listing = httpx.get(live.url + "/v1/audio/voices").json()["voices"]
    assert name in [v["id"] for v in listing if v["kind"] == "stored"]
    listed = browser.evaluate(session, "[...document.querySelectorAll('#voices-list li')].map(li => li.dataset.name)")
    assert listed == [name]
    assert browser.evaluate(session, "document.getElementById('voice').value") == name  # selected to speak with
    assert browser.evaluate(session, "document.getElementById('use-ref').checked") is False

    speak(browser, session)  # with the stored voice
    sent = browser.evaluate(session, "window.sent")[-1]
    assert sent["voice"] == name and "ref_audio" not in sent
    assert downloaded(browser, session) == pcm48(in_process(runtime, text=text, voice=name, seed=6, max_frames=16))

    browser.evaluate(session, f"document.querySelector('#voices-list li[data-name=\"{name}\"] button').click()")
    assert browser.wait_for(session, "document.getElementById('voice-status').dataset.state === 'deleted'", 30)
    assert browser.evaluate(session, "document.querySelectorAll('#voices-list li').length") == 0
    assert name not in browser.evaluate(session, "[...document.getElementById('voice').options].map(o => o.value)")
    assert name not in [v["id"] for v in httpx.get(live.url + "/v1/audio/voices").json()["voices"]]
    assert [v.name for v in runtime.voices.list()] == []
