"""`POST /v1/audio/speech/batch` through httpx and the official `openai` client against a real uvicorn server:
request-level defaults with per-item overrides, results in the order given, each item's audio the runtime's
own in its `response_format`, a bad item failing alone with its field named, the item cap, the batch faster
than its items one by one, and a client that leaves cancelling every item (nothing held afterwards)."""

from __future__ import annotations

import base64
import io

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf

from holds import slow_frames
from serverkit import CARD, TEXT, LiveServer, in_process, s16, shared_runtime, wait_idle
from v2.server import ServerConfig

BATCH = "/v1/audio/speech/batch"
SPEECH = "/v1/audio/speech"
FRAMES = 24


@pytest.fixture(scope="module")
def live():
    with LiveServer(shared_runtime(), ServerConfig.for_card(CARD, max_batch_items=16)) as server:
        yield server


def _wav(result: dict) -> np.ndarray:
    assert result["status"] == "success" and result["media_type"] == "audio/wav", result
    return sf.read(io.BytesIO(base64.b64decode(result["audio_data"])), dtype="int16")[0]


def test_sixteen_items_one_bad_fifteen_audios_in_order_faster_than_one_by_one(live):
    rt = shared_runtime()
    items = [{"input": f"Item number {i}. {TEXT}", "seed": i, "id": f"line-{i}"} for i in range(16)]
    items[5]["speed"] = 2.0  # the bad one
    defaults = {"response_format": "wav", "max_frames": FRAMES, "min_frames": FRAMES}
    steps = rt.stats()["steps"]  # speed in engine steps, not seconds: the machine's load cannot change it
    r = httpx.post(live.url + BATCH, json={**defaults, "items": items}, timeout=600)
    batch_steps = rt.stats()["steps"] - steps
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["object"], body["total"], body["succeeded"], body["failed"]) == ("speech.batch", 16, 15, 1)
    results = body["results"]
    assert [x["index"] for x in results] == list(range(16))
    assert [x["id"] for x in results] == [f"line-{i}" for i in range(16)]
    bad = results[5]
    assert bad["status"] == "error" and "audio_data" not in bad
    assert set(bad["error"]) == {"message", "type", "param", "code"} and bad["error"]["param"] == "speed"
    assert bad["error"]["message"].startswith("speed:")
    for i in (0, 9, 15):  # each audio is the runtime's own for that item
        want = in_process(rt, text=items[i]["input"], seed=i, max_frames=FRAMES, min_frames=FRAMES)
        assert np.array_equal(_wav(results[i]), s16(want.audio))
    assert all(x["frames"] == FRAMES for j, x in enumerate(results) if j != 5)
    steps = rt.stats()["steps"]  # the same fifteen, one after the other
    for i, item in enumerate(items):
        if i != 5:
            one = {k: v for k, v in item.items() if k != "id"}
            assert httpx.post(live.url + SPEECH, json={**defaults, **one, "stream": False},
                              timeout=600).status_code == 200
    one_by_one_steps = rt.stats()["steps"] - steps
    assert batch_steps < one_by_one_steps, (batch_steps, one_by_one_steps)
    wait_idle(rt)


def test_overrides_formats_and_the_openai_client(live):
    client = openai.OpenAI(base_url=live.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    body = {"input": TEXT, "seed": 3, "max_new_tokens": 8, "response_format": "pcm",
            "items": [{}, {"response_format": "flac", "id": "f"}, {"input": "Another line.", "seed": 4}]}
    out = client.post("/audio/speech/batch", body=body, cast_to=object)
    assert isinstance(out, dict) and out["succeeded"] == 3
    first, flac, other = out["results"]
    want = in_process(shared_runtime(), text=TEXT, seed=3, max_frames=8)
    assert first["media_type"] == "audio/pcm" and (first["sample_rate"], first["channels"]) == (24000, 1)
    assert flac["media_type"] == "audio/flac" and flac["id"] == "f" and first["id"] is None
    samples = sf.read(io.BytesIO(base64.b64decode(flac["audio_data"])), dtype="int16")[0]
    assert np.array_equal(samples, s16(want.audio))
    other_want = in_process(shared_runtime(), text="Another line.", seed=4, max_frames=8)
    assert other["frames"] == other_want.metrics.frames
    with pytest.raises(openai.BadRequestError) as e:
        client.post("/audio/speech/batch", body={"items": [{"input": "x"}] * 17}, cast_to=object)
    err = e.value.body
    assert err["param"] == "items" and "16" in err["message"] and "--max-batch-items" in err["message"]


@pytest.mark.parametrize("body, param", [
    ({}, "items"), ({"items": []}, "items"), ({"items": "Hello"}, "items"),
    ({"items": [{"input": "x"}, "text"]}, "items[1]"), ({"items": [{"input": "x"}, ["input", "x"]]}, "items[1]"),
    ({"items": [None]}, "items[0]"),  # an item that is not an object is no request: the batch is malformed
    ({"items": [{"input": "x"}], "speed": 3.0}, "speed"),  # a default checked when planned: what every item failed on
    ({"items": [{"input": "x"}, {"input": "y"}], "temperature": 9.0}, "temperature"),  # checked by the family
    ({"items": [{"input": "x"}, {"input": "y", "speed": 1.0}], "speed": 3.0}, None),  # one item overrides it
    ({"items": [{"input": "x"}], "temperature": "hot"}, "temperature"),
    ({"items": [{"input": "x"}], "stream": True}, "stream"),
    ({"items": [{"input": "x"}], "nonsense": 1}, "nonsense"),
])
def test_a_bad_batch_is_refused_whole_naming_its_field(live, body, param):
    r = httpx.post(live.url + BATCH, json=body, timeout=60)
    if param is None:  # the default is not every item's: the item that takes it fails alone, the other runs
        assert r.status_code == 200, r.text
        results = r.json()["results"]
        assert results[0]["error"]["param"] == "speed" and results[1]["status"] == "success", results
        wait_idle(shared_runtime())
        return
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
    if isinstance(body.get(param), float):  # a value refused only with a whole request: every item's
        assert "a request-level default" in r.json()["error"]["message"]


def test_each_bad_item_names_its_field_and_the_others_run(live):
    items = [{"input": TEXT}, {"input": TEXT, "stream_format": "sse"}, {"input": TEXT, "id": 7},
             {"voice": "nobody-here"}, {"input": TEXT, "voice": "nobody-here"}, {"input": TEXT, "max_frames": 10**6}]
    r = httpx.post(live.url + BATCH, json={"max_frames": 4, "response_format": "wav", "items": items}, timeout=120)
    assert r.status_code == 200, r.text
    params = [x["error"]["param"] if x["status"] == "error" else None for x in r.json()["results"]]
    assert params == [None, "stream_format", "id", "input", "voice", "max_frames"]
    wait_idle(shared_runtime())


def test_a_client_that_leaves_cancels_every_item(live, monkeypatch):
    rt = shared_runtime()
    slow_frames(rt.family.ar_loop, monkeypatch, 0.005)  # 600 steps of 6 rows take >= 18 s: no answer within 1 s
    items = [{"input": TEXT, "seed": i} for i in range(6)]
    body = {"max_frames": 600, "min_frames": 600, "response_format": "pcm", "items": items}
    aborted = _aborted(live)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(live.url + BATCH, json=body, timeout=httpx.Timeout(60, read=1.0))
    wait_idle(rt, timeout=120)  # a hang check: the count below shows they were cancelled, not run to the end
    assert _aborted(live) == aborted + len(items)


def _aborted(live) -> float:
    """Requests the server saw end with abort (its Prometheus counter)."""
    for line in httpx.get(live.url + "/metrics").text.splitlines():
        if line.startswith('v2_requests_total{finish_reason="abort"}'):
            return float(line.split()[-1])
    return 0.0
