"""The playground page in a real headless Chromium: it loads, lists voices, streams a synthesis through the
server and plays it while it arrives in every format it offers as streamed (Web Audio for wav and pcm, a
MediaSource for mp3 and aac), plays the others once complete, reports exactly the audio length the runtime
made, then offers the whole audio (player, download with the format's file name, waveform; by default a wav
with its sizes filled in); a seeded card plays 20 dB down with a note while the bytes stay the server's; its
sampling knobs reach the runtime; a reference recording chosen in the file input clones, is saved as a voice,
listed, spoken with and deleted; live mode speaks over the speech stream and its Stop cancels the utterance."""

from __future__ import annotations

import base64
import io
import json
import struct
from pathlib import Path
from urllib.parse import urlencode

import httpx
import numpy as np
import pytest
import soundfile as sf

from cdp_pipe import Browser, chromium
from holds import slow_frames
from serverkit import CARD, LiveServer, decode, in_process, wait_idle
from v2.runtime import Runtime
from v2.server import ServerConfig
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
PLAYBACK = ("(() => { const a = document.getElementById('audio-seconds').dataset, "
            "f = document.getElementById('format'), o = f.options[f.selectedIndex]; "
            "return {streamed: o.dataset.streamed, label: o.textContent, heard_at_end: Number(a.heardAtEnd || 0), "
            "gain: Number(a.gain), volume: document.getElementById('player').volume, "
            "seeded: document.getElementById('page').dataset.seeded, "
            "note: !document.getElementById('seeded-note').hidden}; })()")
STREAMED = ("wav", "pcm", "mp3", "aac")  # the formats this Chromium plays while they arrive
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
    for module in ("audio.js", "voices.js", "util.js", "live.js"):  # the modules it imports, as the browser asks
        r = httpx.get(f"{live.url}/static/{module}")
        assert r.status_code == 200 and "javascript" in r.headers["content-type"], module


def _page_state(browser: Browser, session: str) -> dict:
    state = json.loads(browser.evaluate(session, STATE))
    state.update(browser.evaluate(session, PLAYBACK))
    return state


@pytest.mark.parametrize("fmt", ["wav", "pcm", "mp3", "aac", "opus", "flac"])
def test_the_page_streams_a_synthesis_and_offers_the_whole_audio(live, runtime, browser, fmt):
    """Every format the page offers as streamed plays while it arrives: audio had been heard before the last
    byte came (Web Audio for wav and pcm, a MediaSource for mp3 and aac); the others say on the menu that
    they play when complete and are asked for whole. Then the whole audio: player, download, waveform."""
    text, seed, frames = "Hello from the playground.", 2, 60  # this seed speaks to the limit: 4.8 s, 4 chunks
    want = in_process(runtime, text=text, seed=seed, max_frames=frames)
    assert want.metrics.frames == frames
    query = urlencode({"text": text, "format": fmt, "seed": seed, "max_frames": frames, "autorun": 1})
    session = open_page(browser, f"{live.url}/?{query}")
    done = browser.wait_for(session, "['done', 'error'].includes(document.getElementById('status').dataset.state)",
                            timeout=60)
    state = _page_state(browser, session)
    assert done and state["state"] == "done", state
    streamed = state["streamed"] == "1"
    assert streamed == (fmt in STREAMED), state  # wav, pcm always; mp3, aac where MediaSource takes them
    label = (f"{fmt} (streamed, raw s16le download)" if fmt == "pcm" else f"{fmt} (streamed)") if streamed \
        else f"{fmt} (plays when complete)"
    assert state["label"] == label, state
    seconds = want.metrics.audio_seconds
    # pcm, wav: the runtime's samples, all of them; streamed mp3, aac: with the encoder's delay and padding
    # (a streamed header cannot tell the decoder to trim them); whole opus, flac: trimmed by their headers
    slack = {"wav": 1e-6, "pcm": 1e-6, "mp3": 0.08, "aac": 0.08, "opus": 0.03, "flac": 1e-6}[fmt]
    assert state["seconds"] == pytest.approx(seconds, abs=slack), state
    assert state["ttfa"].endswith("ms") and state["voices"] > 1  # first audio shown; the voice list loaded
    if streamed:
        assert state["reads"] >= 2  # it arrived in pieces, as a stream
        assert state["played"] == pytest.approx(seconds, abs=1e-4 if fmt in ("wav", "pcm") else slack), state
        assert 0 < state["heard_at_end"] < seconds, state  # playing before the last byte came
    else:
        assert state["reads"] == 1 and state["heard_at_end"] == 0, state
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
    else:  # the very file the server sends for this request, streamed or whole as the page asked for it
        body = {"input": text, "seed": seed, "max_frames": frames, "response_format": fmt,
                **({"stream_format": "audio"} if streamed else {"stream": False})}
        sent = httpx.post(live.url + "/v1/audio/speech", json=body, timeout=60).content
        if fmt == "opus":  # each Ogg stream draws its serial number: the same pages but for it
            assert np.array_equal(decode(file)[0], decode(sent)[0])
        else:
            assert file == sent


def test_the_default_format_downloads_a_wav_with_its_sizes(live, runtime, browser):
    """Nothing chosen: the page speaks wav, streamed, and offers a wav whose header holds the real sizes."""
    want = in_process(runtime, text="By default.", seed=4, max_frames=20)
    session = open_page(browser, live.url + "/")
    assert browser.evaluate(session, "document.getElementById('format').value") == "wav"
    set_value(browser, session, "text", "By default.")
    set_value(browser, session, "seed", 4)
    set_value(browser, session, "max-frames", 20)
    speak(browser, session)
    assert browser.evaluate(session, "document.getElementById('download').download") == "speech.wav"
    file = downloaded(browser, session)
    assert file[:4] == b"RIFF" and file[8:12] == b"WAVE" and file[36:40] == b"data"
    assert struct.unpack("<I", file[4:8])[0] == len(file) - 8 and struct.unpack("<I", file[40:44])[0] == len(file) - 44
    samples, rate = sf.read(io.BytesIO(file), dtype="int16")
    assert rate == want.sample_rate and np.array_equal(samples, to_s16(want.audio.T))


@pytest.mark.parametrize("fmt", ["wav", "mp3", "flac"])
def test_a_seeded_card_plays_20_db_down_with_a_note(live, runtime, browser, fmt):
    """The tiny card's weights are seeded: `/v1/models` says so, the page shows its note and plays at a gain
    of 0.1 (Web Audio's gain node, the stream's and the result's audio elements), and the bytes offered are
    the server's own."""
    assert all(m["seeded_noise"] is True for m in httpx.get(live.url + "/v1/models").json()["data"])
    want = in_process(runtime, text="Quietly.", seed=4, max_frames=20)
    query = urlencode({"text": "Quietly.", "format": fmt, "seed": 4, "max_frames": 20, "autorun": 1})
    session = open_page(browser, f"{live.url}/?{query}")
    assert browser.wait_for(session, "document.getElementById('status').dataset.state === 'done'", timeout=60)
    state = _page_state(browser, session)
    assert state["seeded"] == "1" and state["note"] and state["gain"] == pytest.approx(0.1), state
    assert state["volume"] == pytest.approx(0.1), state
    file = downloaded(browser, session)
    if fmt == "wav":
        assert np.array_equal(sf.read(io.BytesIO(file), dtype="int16")[0], to_s16(want.audio.T))
    else:
        body = {"input": "Quietly.", "seed": 4, "max_frames": 20, "response_format": fmt,
                **({"stream_format": "audio"} if state["streamed"] == "1" else {"stream": False})}
        assert file == httpx.post(live.url + "/v1/audio/speech", json=body, timeout=60).content


def test_a_card_with_real_weights_plays_at_full_gain_without_the_note(runtime, browser):
    config = ServerConfig.for_card(CARD, seeded_noise=False)  # as `serve --checkpoint DIR` sets it
    with LiveServer(runtime, config) as server:
        assert all(m["seeded_noise"] is False for m in httpx.get(server.url + "/v1/models").json()["data"])
        query = urlencode({"text": "Loudly.", "format": "wav", "seed": 4, "max_frames": 12, "autorun": 1})
        session = open_page(browser, f"{server.url}/?{query}")
        assert browser.wait_for(session, "document.getElementById('status').dataset.state === 'done'", timeout=60)
        state = _page_state(browser, session)
    assert state["seeded"] == "0" and not state["note"] and state["gain"] == 1 and state["volume"] == 1, state


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


def test_live_mode_speaks_over_the_stream_and_stop_cancels_the_utterance(live, runtime, browser, monkeypatch):
    """"live" speaks over WS /v1/audio/speech/stream; Stop sends input.cancel: the page sees the utterance's
    cancelled session.done and the acknowledgement, no audio after them, the runtime holds nothing, and the
    same socket speaks the next text with the runtime's length (frames take >= 10 ms each, so the utterance
    outlasts the click's way to the server however fast the host is)."""
    slow_frames(runtime.engine.graph.paged_loop, monkeypatch, 0.01)
    session = open_page(browser, live.url + "/")
    browser.evaluate(session, "document.getElementById('live').checked = true")
    for element, value in {"text": "A long sentence to stop early. " * 4, "seed": 2, "max-frames": 300}.items():
        set_value(browser, session, element, value)
    browser.evaluate(session, "document.getElementById('speak').click()")
    assert browser.wait_for(session, "window.liveLog.includes('binary')", timeout=60)
    browser.evaluate(session, "document.getElementById('stop').click()")
    assert browser.wait_for(session, "document.getElementById('status').dataset.state === 'stopped'", timeout=30)
    assert browser.wait_for(session, "window.liveLog.includes('input.cancelled:cancelled')", timeout=10)
    log = browser.evaluate(session, "window.liveLog")
    first = min(i for i, kind in enumerate(log) if kind.endswith(":cancelled"))
    assert "binary" not in log[first:] and log[-2:] == ["session.done:cancelled", "input.cancelled:cancelled"], log
    assert log.count("session.ready") == 1
    wait_idle(runtime, timeout=10)
    want = in_process(runtime, text="Once more.", seed=2, max_frames=8)
    set_value(browser, session, "text", "Once more.")
    set_value(browser, session, "max-frames", 8)
    state = speak(browser, session)
    assert state["seconds"] == pytest.approx(want.metrics.audio_seconds, abs=1e-6), state
    assert browser.evaluate(session, "window.liveLog").count("session.ready") == 2  # the new config, same socket


# The live checkbox's words after the box, as one paragraph: in reading order each piece of text is on the same
# line to the right of the one before, or on a later line starting where the first line starts (words laid
# out side by side in columns go back up, or start a line elsewhere).
LABEL_FLOWS = ("(() => { const box = document.getElementById('live'), label = box.closest('label'); "
               "const walk = document.createTreeWalker(label, NodeFilter.SHOW_TEXT); const rects = []; "
               "for (let n = walk.nextNode(); n; n = walk.nextNode()) { const r = document.createRange(); "
               "r.selectNodeContents(n); rects.push(...[...r.getClientRects()].filter(x => x.width > 0)); } "
               "const x0 = rects[0].left, b = box.getBoundingClientRect(); "
               "const ok = rects.every((r, i) => i === 0 || (Math.abs(r.top - rects[i - 1].top) < 2 "
               "? r.left >= rects[i - 1].right - 1 : r.top > rects[i - 1].top && Math.abs(r.left - x0) < 2)); "
               "return {ok, beside: b.right <= x0 && b.top < rects[0].bottom && b.bottom > rects[0].top, "
               "rects: rects.map(r => [Math.round(r.left), Math.round(r.top)])}; })()")


def test_the_live_checkbox_label_reads_as_one_paragraph_beside_its_box(live, browser):
    session = open_page(browser, live.url + "/")
    for width in (1000, 520, 360):  # wide, and narrow enough that the words wrap
        browser.call("Emulation.setDeviceMetricsOverride", session, width=width, height=800, deviceScaleFactor=1,
                     mobile=False)
        flow = browser.evaluate(session, LABEL_FLOWS)
        assert flow["ok"] and flow["beside"], (width, flow)


def _result(browser: Browser, session: str) -> dict:
    return json.loads(browser.evaluate(session, RESULT))


def assert_live_pcm(file: bytes, url: str, text: str, **knobs: int) -> None:
    """`file` is a wav of the pcm the speech stream sends for `text`: the server's streamed pcm (its default
    rate, 24 kHz) for the same request, sample for sample."""
    body = {"input": text, "response_format": "pcm", "stream_format": "audio", **knobs}
    sent = httpx.post(url + "/v1/audio/speech", json=body, timeout=60)
    assert sent.status_code == 200, sent.text
    samples, rate = sf.read(io.BytesIO(file), dtype="int16")
    assert rate == int(sent.headers["X-Sample-Rate"]) and samples.tobytes() == sent.content


def test_live_mode_offers_its_own_whole_audio_and_no_run_leaves_the_last_ones(live, runtime, browser):
    """A live run ends with its own player, download (a wav built from the pcm received, sizes filled in: the
    runtime's samples) and waveform, in place of the previous run's; a run that is stopped or refused leaves
    no earlier run's audio on the page."""
    session = open_page(browser, live.url + "/")
    set_value(browser, session, "text", "Over HTTP first.")
    set_value(browser, session, "max-frames", 8)
    speak(browser, session)
    before = _result(browser, session)
    assert before["shown"] and before["name"] == "speech.wav", before

    browser.evaluate(session, "document.getElementById('live').checked = true")
    for element, value in {"text": "Then live.", "seed": 3, "max-frames": 12}.items():
        set_value(browser, session, element, value)
    speak(browser, session)
    after = _result(browser, session)
    assert after["shown"] and after["name"] == "speech.wav", after
    assert after["href"] != before["href"] and after["player"] != before["player"], (before, after)
    file = downloaded(browser, session)
    assert struct.unpack("<I", file[4:8])[0] == len(file) - 8 and struct.unpack("<I", file[40:44])[0] == len(file) - 44
    assert_live_pcm(file, live.url, "Then live.", seed=3, max_frames=12)
    pixels = browser.evaluate(session, PIXELS)
    assert pixels["drawn"] == "1" and pixels["painted"] > pixels["width"], pixels

    # stopped: neither this run's partial audio nor the last run's is offered
    set_value(browser, session, "text", "A long sentence to stop early. " * 4)
    set_value(browser, session, "max-frames", 300)
    browser.evaluate(session, "window.liveLog = []; document.getElementById('speak').click()")
    assert browser.wait_for(session, "window.liveLog.includes('binary')", timeout=60)
    browser.evaluate(session, "document.getElementById('stop').click()")
    assert browser.wait_for(session, "document.getElementById('status').dataset.state === 'stopped'", timeout=30)
    gone = _result(browser, session)
    assert not gone["shown"] and after["href"] not in (gone["href"], gone["player"]), gone
    wait_idle(runtime, timeout=10)

    # refused (over HTTP, a bad knob): the page shows the error and no audio
    browser.evaluate(session, "document.getElementById('live').checked = false")
    set_value(browser, session, "max-frames", 8)
    speak(browser, session)
    assert _result(browser, session)["shown"]
    set_value(browser, session, "top-k", 2.5)
    browser.evaluate(session, "document.getElementById('speak').click()")
    assert browser.wait_for(session, "document.getElementById('status').dataset.state === 'error'", timeout=30)
    assert not _result(browser, session)["shown"]


KEY = "page-ключ/+="  # not ASCII, and the characters base64 and base64url differ in


@pytest.fixture(scope="module")
def keyed(runtime):
    with LiveServer(runtime, api_key=KEY) as server:
        yield server


def test_live_mode_reaches_a_server_that_needs_a_key(keyed, live, runtime, browser):
    """The key typed into the page's key field goes with the live socket (a subprotocol entry; a browser can
    set no header on a WebSocket); a wrong key is refused and the page says so; the right one, typed after,
    connects anew and speaks."""
    want = in_process(runtime, text="Keyed.", seed=1, max_frames=8)
    session = open_page(browser, keyed.url + "/")
    browser.evaluate(session, "document.getElementById('live').checked = true")
    for element, value in {"text": "Keyed.", "seed": 1, "max-frames": 8, "api-key": "wrong"}.items():
        set_value(browser, session, element, value)
    browser.evaluate(session, "document.getElementById('speak').click()")
    assert browser.wait_for(session, "document.getElementById('status').dataset.state === 'error'", timeout=30)
    assert "API key" in browser.evaluate(session, "document.getElementById('status').textContent")
    set_value(browser, session, "api-key", KEY)
    state = speak(browser, session)
    assert state["seconds"] == pytest.approx(want.metrics.audio_seconds, abs=1e-6), state
    assert_live_pcm(downloaded(browser, session), live.url, "Keyed.", seed=1, max_frames=8)  # same runtime
    wait_idle(runtime, timeout=10)
