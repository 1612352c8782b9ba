"""The playground's chat mode in a real headless Chromium, on chatkit's scripted chat card: the page shows the
chat in place of the speech form, a typed turn streams in its reply's text and voice (the same transcript and
pcm16 bytes as the whole answer to the same body), and the next turn carries the conversation so far."""

from __future__ import annotations

import base64
import io
import json

import httpx
import pytest
import soundfile as sf

import cdp_pipe
from cdp_pipe import Browser, chromium
from chatkit import ChatRuntime
from serverkit import LiveServer
from v2.server import ServerConfig

CHROMIUM = chromium()
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (scripts/setup.sh installs it "
                                                         "with apt-get when run as root)")
MODEL = "chat_tiny"
DONE = "['done', 'error'].includes(document.getElementById('chat-status').dataset.state)"
LOG = ("JSON.stringify({status: document.getElementById('chat-status').textContent, "
       "turns: [...document.querySelectorAll('#chat-log li')].map(li => [li.dataset.role, li.textContent]), "
       "bytes: Number(document.getElementById('chat').dataset.audioBytes || 0), "
       "result: !document.getElementById('result').hidden})")


@pytest.fixture(scope="module")
def live():
    runtime = ChatRuntime(MODEL)
    with LiveServer(runtime, ServerConfig.for_card(MODEL)) as server:
        server.runtime = runtime
        yield server


@pytest.fixture(scope="module")
def browser():
    """Chromium with a fake microphone (a tone), taken without asking."""
    flags = list(cdp_pipe.FLAGS)
    cdp_pipe.FLAGS[:] = [*flags, "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream"]
    try:
        b = Browser(CHROMIUM)
    finally:
        cdp_pipe.FLAGS[:] = flags
    yield b
    b.close()


def send(browser: Browser, session: str, text: str) -> dict:
    browser.evaluate(session, f"document.getElementById('chat-text').value = {json.dumps(text)}")
    browser.evaluate(session, "document.getElementById('chat-send').click()")
    browser.wait_for(session, f"document.getElementById('chat-status').dataset.state === 'running' || {DONE}",
                     timeout=30)
    assert browser.wait_for(session, DONE, timeout=60)
    return json.loads(browser.evaluate(session, LOG))


def test_a_typed_turn_streams_in_its_reply_and_the_next_turn_carries_the_conversation(live, browser):
    session = browser.open(live.url + "/")
    assert browser.wait_for(session, "document.getElementById('page').dataset.ready === '1'", timeout=30)
    shown = browser.evaluate(session, "[document.getElementById('chat').hidden, "
                                      "document.getElementById('speak').offsetParent === null, "
                                      "document.getElementById('chat-voice').options.length]")
    assert shown == [False, True, 3]  # chat in place of the speech form; the card's three speakers
    first = send(browser, session, "Tell me about rivers.")
    assert first["status"].startswith("Done"), first
    (role_u, said), (role_a, reply) = first["turns"]
    assert (role_u, said, role_a) == ("user", "Tell me about rivers.", "assistant") and reply
    messages = [{"role": "user", "content": "Tell me about rivers."}]
    whole = httpx.post(live.url + "/v1/chat/completions", timeout=60, json={
        "model": MODEL, "messages": messages, "seed": 0, "modalities": ["text", "audio"],
        "audio": {"voice": "Ethan", "format": "wav"}}).json()["choices"][0]["message"]["audio"]
    wav, _ = sf.read(io.BytesIO(base64.b64decode(whole["data"])), dtype="int16")
    assert reply == whole["transcript"] and first["bytes"] == 2 * len(wav) and first["result"]
    second = send(browser, session, "And the sea?")
    assert second["status"].startswith("Done") and len(second["turns"]) == 4
    sent = next(f for f in reversed(live.runtime.submitted) if len(f["messages"]) == 3)
    assert sent["messages"] == [*messages, {"role": "assistant", "content": reply},
                                {"role": "user", "content": "And the sea?"}]


def test_a_recorded_turn_goes_as_an_input_audio_wav(live, browser):
    session = browser.open(live.url + "/")
    assert browser.wait_for(session, "document.getElementById('page').dataset.ready === '1'", timeout=30)
    browser.evaluate(session, "document.getElementById('chat-record').click()")
    assert browser.wait_for(session, "Number(document.getElementById('chat-recorded').dataset.seconds || 0) >= 0.5",
                            timeout=60)
    browser.evaluate(session, "document.getElementById('chat-record').click()")
    assert browser.wait_for(session, "document.getElementById('chat-recorded').textContent.startsWith('Recorded')",
                            timeout=30)
    state = send(browser, session, "What is this sound?")
    assert state["status"].startswith("Done"), state
    turn = live.runtime.submitted[-1]["messages"][-1]
    audio, text = turn["content"]
    assert text == {"type": "text", "text": "What is this sound?"} and audio["input_audio"]["format"] == "wav"
    samples, rate = sf.read(io.BytesIO(base64.b64decode(audio["input_audio"]["data"])), dtype="float32")
    assert rate >= 8000 and len(samples) >= rate // 2 and float(abs(samples).max()) > 0.01  # the fake tone
    assert browser.evaluate(session, "document.getElementById('chat-recorded').textContent") == ""  # sent once
