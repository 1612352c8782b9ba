"""Over HTTP a mistyped field is a 400 naming it (OpenAI's `param`), whose message gives the closest field and
the page of the fields, as Python's RequestError does: on /v1/audio/speech, a batch's top level and its items;
the input cap's refusal names the serve option that raises it."""

from __future__ import annotations

import httpx
import pytest

from serverkit import LiveServer, shared_runtime

SPEECH = "/v1/audio/speech"
PAGE = "the fields: designs/request_fields.md"


@pytest.fixture(scope="module")
def live():
    with LiveServer(shared_runtime()) as server:
        yield server


def _error(response: httpx.Response) -> dict:
    assert response.status_code == 400, response.text
    return response.json()["error"]


def test_speech_names_the_closest_field(live):
    e = _error(httpx.post(live.url + SPEECH, json={"input": "Hi.", "temprature": 1.0}, timeout=60))
    assert e["param"] == "temprature"
    assert e["message"] == f"temprature: Extra inputs are not permitted (did you mean 'temperature'? {PAGE})"
    e = _error(httpx.post(live.url + SPEECH, json={"input": "Hi.", "zzzz": 1}, timeout=60))
    assert e["message"] == f"zzzz: Extra inputs are not permitted ({PAGE})"


def test_a_batch_names_the_closest_field_at_the_top_and_in_an_item(live):
    e = _error(httpx.post(live.url + SPEECH + "/batch", json={"items": [{"input": "Hi."}], "sed": 1}, timeout=60))
    assert e["param"] == "sed" and "did you mean 'seed'?" in e["message"]
    r = httpx.post(live.url + SPEECH + "/batch", json={"items": [{"input": "Hi.", "max_frame": 2}]}, timeout=120)
    item = r.json()["results"][0]
    assert item["status"] == "error" and item["error"]["param"] == "max_frame"
    assert "did you mean 'max_frames'?" in item["error"]["message"]


def test_the_input_cap_names_the_option_that_raises_it(live):
    e = _error(httpx.post(live.url + SPEECH, json={"input": "w" * 4097}, timeout=60))
    assert e["param"] == "input" and e["message"] == ("input: 4097 characters, over this server's limit of 4096 "
                                                      "(--max-input-chars)")
