"""Refusals that must say what is wrong and nothing more: a `file://` reference the OS cannot open (a symlink
loop, a name too long, a folder, permission denied) is a 400 naming its field whose message holds no server
path; every method a path does not take is a 405 whose `Allow` lists what it takes (the static files' mount
and the speech stream's WebSocket path included)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import httpx
import pytest

from serverkit import TEXT, LiveServer, shared_runtime
from v2.server import schema
from v2.server.errors import ApiError
from v2.server.schema import read_reference

SPEECH = "/v1/audio/speech"


@pytest.fixture(scope="module")
def media(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("allowed-media-folder")
    (root / "loop1").symlink_to(root / "loop2")
    (root / "loop2").symlink_to(root / "loop1")
    (root / "folder").mkdir()
    (root / "voice.wav").write_bytes(b"RIFF" + bytes(60))
    return root


def _refusal(media: Path, name: str, **kw) -> ApiError:
    with pytest.raises(ApiError) as refused:
        read_reference(f"file://{media}/{name}", media, **kw)
    return refused.value


def _leaks_nothing(message: str, media: Path) -> None:
    assert str(media) not in message and media.name not in message and "/" not in message.split(":", 1)[1], message


@pytest.mark.parametrize("name", ["loop1", "loop1/x", "folder/../loop1", "x" * 300, "x/" * 3000, "folder", "a\x00b",
                                  "missing.wav"])
def test_a_file_reference_the_os_refuses_names_its_field_and_no_server_path(media, name):
    e = _refusal(media, name)
    assert (e.status, e.param) == (400, "ref_audio") and e.message.startswith("ref_audio: "), e.message
    _leaks_nothing(e.message, media)


def test_the_symlink_loop_is_called_one(media):
    assert "loop" in _refusal(media, "loop1").message.lower()


@pytest.mark.parametrize("err", [errno.EACCES, errno.EISDIR, errno.ELOOP, errno.ENAMETOOLONG, errno.EPERM])
def test_an_os_error_at_open_says_why_without_the_path(media, monkeypatch, err):
    """The tests run as root, which no permission bit stops: the OS's refusal at open is simulated, the path in
    it as the OS puts it there."""
    def refuse(path, *args, **kwargs):
        raise OSError(err, os.strerror(err), str(path))

    monkeypatch.setattr(schema.os, "open", refuse)
    e = _refusal(media, "voice.wav")
    assert e.param == "ref_audio" and os.strerror(err) in e.message, e.message
    _leaks_nothing(e.message, media)


def test_a_context_turns_file_names_context_and_no_server_path(media):
    with pytest.raises(ApiError) as refused:
        read_reference(f"file://{media}/loop1", media, name="context[0].audio", param="context")
    assert refused.value.param == "context"
    _leaks_nothing(refused.value.message, media)


def test_over_http_the_loop_is_a_clean_400(media):
    with LiveServer(shared_runtime(), allowed_media_path=media) as server:
        r = httpx.post(server.url + SPEECH, json={"input": TEXT, "ref_audio": f"file://{media}/loop1"}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "ref_audio", r.text
    assert str(media) not in r.text and media.name not in r.text, r.text


UNDECLARED = ["OPTIONS", "PUT", "PATCH", "DELETE", "POST", "TRACE"]


@pytest.fixture(scope="module")
def live():
    with LiveServer(shared_runtime()) as server:
        yield server


@pytest.mark.parametrize("path", ["/static/index.html", "/static/no-such-file"])
@pytest.mark.parametrize("method", UNDECLARED)
def test_the_static_mount_allows_get_and_head(live, path, method):
    r = httpx.request(method, live.url + path, timeout=30)
    assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD", (r.status_code, r.headers)
    assert r.json()["error"]["code"] == "http_405"


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"])
def test_the_stream_path_answers_other_methods_405_with_allow(live, method):
    r = httpx.request(method, live.url + "/v1/audio/speech/stream", timeout=30)
    assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD", (r.status_code, r.headers)


def test_a_plain_get_of_the_stream_path_is_still_a_404_in_openais_shape(live):
    for method in ("GET", "HEAD"):
        r = httpx.request(method, live.url + "/v1/audio/speech/stream", timeout=30)
        assert r.status_code == 404, r.status_code
    assert "websocket" in httpx.get(live.url + "/v1/audio/speech/stream", timeout=30).json()["error"]["message"].lower()
