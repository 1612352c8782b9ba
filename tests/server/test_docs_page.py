"""`/docs`: the interactive API page (Swagger UI over /openapi.json) answers, and every file it loads (script,
stylesheet, icon) comes from this server, so the page works offline; it takes no API key (only /v1 does). And
the README's batch example, sent as written, gets the answer the README shows."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

from serverkit import LiveServer, shared_runtime


@pytest.fixture(scope="module")
def live():
    with LiveServer(shared_runtime(), api_key="k") as server:
        yield server


def test_docs_is_swagger_ui_over_the_published_schema(live):
    page = httpx.get(live.url + "/docs", timeout=30)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "SwaggerUIBundle" in page.text and "url: '/openapi.json'" in page.text
    assert httpx.get(live.url + "/openapi.json", timeout=30).status_code == 200
    assert "/docs" not in httpx.get(live.url + "/openapi.json", timeout=30).json()["paths"]


def test_every_asset_the_page_loads_is_served_here(live):
    page = httpx.get(live.url + "/docs", timeout=30).text
    urls = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert len(urls) == 3, urls  # the script, the stylesheet, the icon
    assert not re.search(r"https?://", page)  # no CDN, no other host
    kinds = {}
    for url in urls:
        answer = httpx.get(live.url + url, timeout=30)
        assert answer.status_code == 200 and len(answer.content) > 1000, url
        kinds[url.rsplit(".", 1)[-1]] = (answer.headers["content-type"], answer.content)
    assert kinds["js"][0].startswith(("text/javascript", "application/javascript"))
    assert kinds["css"][0].startswith("text/css") and kinds["png"][0] == "image/png"
    # Swagger UI 5 (FastAPI's own choice): 4.x cannot render the OpenAPI 3.1 document /openapi.json is
    assert httpx.get(live.url + "/openapi.json", timeout=30).json()["openapi"].startswith("3.1")
    assert b"isOAS31" in kinds["js"][1]


def test_the_readmes_batch_example_answers_as_it_says(live):
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    example = re.search(r"curl -s http://127.0.0.1:8000(/v1/audio/speech/batch) .*?-d '(.*?)'", readme, re.S)
    assert example is not None
    answer = httpx.post(live.url + example.group(1), json=json.loads(example.group(2)), timeout=300,
                        headers={"Authorization": "Bearer k"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["object"], body["total"], body["succeeded"], body["failed"]) == ("speech.batch", 2, 2, 0)
    assert [(r["index"], r["id"], r["status"]) for r in body["results"]] == [(0, None, "success"), (1, "bye", "success")]
    assert all(r["audio_data"].startswith("UklGR") and r["media_type"] == "audio/wav" for r in body["results"])
