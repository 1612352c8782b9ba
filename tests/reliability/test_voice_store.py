"""The voice store across threads and processes: names matched whole; a reader sees a whole voice or none
while others add and remove (threads, and separate processes with their own stores on one directory); no
errors and no staging left by writers that race or fail; symbolic links never followed and removable; a
taken name refused unless the caller asks to replace (Python, CLI, HTTP); short reprs and a `voices list`
table."""

from __future__ import annotations

import json
import os
import string
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf
from hypothesis import example, given, settings, strategies as st

from v2.cli import main
from v2.runtime import Runtime
from v2.voices.store import VoiceError, VoiceExists, VoiceStore, check_name
from v2.server import ServerConfig, create_app
from v2.server.serve import ThreadedServer

ROOT = Path(__file__).resolve().parents[2]
CARD = "moss_tts_local_tiny"
HEAD = set(string.ascii_letters + string.digits)
ALLOWED = HEAD | set("_.-")


def no_encoder(_audio: object) -> np.ndarray:
    raise AssertionError("codes only here")


def take(k: int) -> np.ndarray:
    """The codes of write number k: 1 + k % 7 frames, every code k (so codes and meta.json can be matched)."""
    return np.full((1 + k % 7, 12), k % 1024, np.int64)


def whole(voice) -> bool:
    """Whether a voice's codes and transcript come from one write (`take(k)` with text "take k")."""
    k = int(voice.text.split()[1])
    return np.array_equal(voice.codes, take(k))


def leftovers(directory: Path) -> set[str]:
    """What is in the store directory besides its entries and its lock."""
    return {n for n in os.listdir(directory) if n.startswith(".") and n != ".lock"}


# ----- names ---------------------------------------------------------------------------------------------
NAME_CHARS = st.sampled_from(sorted(ALLOWED) + ["\n", "\r", " ", "/", "\\", "\x00", "é", "\u2028", ":"])


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(NAME_CHARS, max_size=70), st.text(max_size=70)))
@example("ok\n")
@example("ok\r\n")
@example("a" * 64 + "\n")
@example("a" * 64)
@example("a" * 65)
@example("ok\x00")
def test_names_are_matched_whole(name):
    valid = 1 <= len(name) <= 64 and name[0] in HEAD and set(name) <= ALLOWED
    if valid:
        assert check_name(name) == name
    else:
        with pytest.raises(VoiceError, match="voice: name"):
            check_name(name)


@pytest.mark.parametrize("name", ["ok\n", "alice\n", "a" * 64 + "\n"])
def test_a_name_with_a_trailing_newline_writes_nothing(tmp_path, name):
    store = VoiceStore(tmp_path, encode=no_encoder, width=12)
    with pytest.raises(VoiceError, match="voice: name"):
        store.add(name, take(1), text="take 1")
    assert not [n for n in os.listdir(tmp_path) if n != ".lock"]


# ----- threads -------------------------------------------------------------------------------------------
def test_threads_see_a_whole_voice_or_none(tmp_path):
    """Two writers (each its own store on the directory) add, replace and remove one name; readers get, list
    and open fresh stores on it meanwhile."""
    failures: list[str] = []
    whole_reads = [0]
    done = threading.Event()

    def writer(first: int) -> None:
        store = VoiceStore(tmp_path, encode=no_encoder, width=12)
        for i in range(first, first + 120):
            try:
                store.add("x", take(i), text=f"take {i}", replace=True)
                if i % 3 == 2:
                    store.remove("x")
            except VoiceError as e:
                if "no stored voice" not in str(e):  # the other writer removed it first
                    failures.append(f"writer: {e!r}")
            except Exception as e:  # noqa: BLE001 - every other failure is the bug
                failures.append(f"writer: {e!r}")

    def reader() -> None:
        store = VoiceStore(tmp_path, encode=no_encoder, width=12)
        n = 0
        while not done.is_set():
            n += 1
            try:
                voices = store.list() + [store.get("x")]
                if n % 8 == 0:
                    fresh = VoiceStore(tmp_path, encode=no_encoder, width=12)
                    voices += fresh.list()
                    failures.extend(f"load: {e}" for e in fresh.errors)
                failures.extend(f"list: {e}" for e in store.errors)
                for voice in voices:
                    if whole(voice):
                        whole_reads[0] += 1
                    else:
                        failures.append(f"reader: a mixed voice {voice!r}")
            except VoiceError as e:
                if "no stored voice" not in str(e):
                    failures.append(f"reader: {e!r}")
            except Exception as e:  # noqa: BLE001
                failures.append(f"reader: {e!r}")

    writers = [threading.Thread(target=writer, args=(k * 1000,)) for k in range(2)]
    readers = [threading.Thread(target=reader) for _ in range(2)]
    for t in readers + writers:
        t.start()
    for t in writers:
        t.join()
    done.set()
    for t in readers:
        t.join()
    assert failures == [], failures[:5]
    assert whole_reads[0] > 0 and leftovers(tmp_path) == set()


# ----- processes -----------------------------------------------------------------------------------------
WORKER = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    import numpy as np
    from v2.voices.store import VoiceError, VoiceStore

    role, directory, first = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    go, stop = directory.parent / "go", directory.parent / "stop"
    take = lambda k: np.full((1 + k % 7, 12), k % 1024, np.int64)

    def refuse(audio):
        raise AssertionError("codes only")

    store = VoiceStore(directory, encode=refuse, width=12)
    print("ready", flush=True)
    while not go.exists():
        time.sleep(0.01)
    failures, whole = [], 0
    if role == "writer":
        for i in range(first, first + 151):  # each ends with an add (150 and 1150): a voice is stored at the end
            try:
                store.add("x", take(i), text=f"take {i}", replace=True)
                if i % 3 == 2:
                    store.remove("x")
            except VoiceError as e:
                if "no stored voice" not in str(e):
                    failures.append(repr(e))
            except Exception as e:
                failures.append(repr(e))
    else:
        n, last = 0, False
        while not last:  # a last read once the writers are done: it sees their voice however fast they were
            last = stop.exists()
            n += 1
            try:
                if n % 8 == 0:
                    fresh = VoiceStore(directory, encode=refuse, width=12)
                    failures += fresh.errors
                    voices = fresh.list()
                else:
                    voices = [store.get("x")]
                for v in voices:
                    k = int(v.text.split()[1])
                    if np.array_equal(v.codes, take(k)):
                        whole += 1
                    else:
                        failures.append(f"mixed {v!r}")
            except VoiceError as e:
                if "no stored voice" not in str(e):
                    failures.append(repr(e))
            except Exception as e:
                failures.append(repr(e))
    print(json.dumps({"failures": failures[:20], "whole": whole}), flush=True)
""")


def test_processes_with_their_own_stores_on_one_directory_see_a_whole_voice_or_none(tmp_path):
    """The CLI beside a running server, or replicas on one host: two writer processes and two readers, each
    with its own VoiceStore on one directory."""
    directory = tmp_path / "voices"
    directory.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    roles = [("writer", 0), ("writer", 1000), ("reader", 0), ("reader", 0)]
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, role, str(directory), str(first)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for role, first in roles]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready", p.stderr.read()
        (tmp_path / "go").touch()
        for p in procs[:2]:
            p.wait(timeout=300)
        (tmp_path / "stop").touch()
        reports = []
        for p in procs:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err[-3000:]
            reports.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    failures = [f for r in reports for f in r["failures"]]
    assert failures == [], failures[:5]
    assert sum(r["whole"] for r in reports[2:]) > 0
    assert leftovers(directory) == set()


# ----- failed writes -------------------------------------------------------------------------------------
def test_a_failing_encoder_leaves_nothing(tmp_path):
    def broken(_audio: object) -> np.ndarray:
        raise RuntimeError("the encoder failed")

    store = VoiceStore(tmp_path, encode=broken, width=12)
    with pytest.raises(RuntimeError, match="the encoder failed"):
        store.add("bob", b"some audio bytes")
    assert "bob" not in store and not [n for n in os.listdir(tmp_path) if n != ".lock"]


FULL_DISK = textwrap.dedent("""
    import json, resource, signal, sys
    import numpy as np
    from v2.voices.store import VoiceStore

    store = VoiceStore(sys.argv[1], encode=None, width=12)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (32768, 32768))  # a file may grow to 32 KiB: a full disk
    big = np.ones((4000, 12), np.int64)  # 384 KB
    seen = []
    for name, replace in (("big", False), ("alice", True)):
        try:
            store.add(name, big, text="too big", replace=replace)
            seen.append("written")
        except OSError:  # EFBIG, or numpy's short-write error
            seen.append("OSError")
    print(json.dumps(seen))
""")


def test_a_write_that_fails_on_disk_leaves_nothing_and_keeps_the_old_voice(tmp_path):
    store = VoiceStore(tmp_path, encode=no_encoder, width=12)
    store.add("alice", take(5), text="take 5")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", FULL_DISK, str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["OSError", "OSError"]
    assert sorted(n for n in os.listdir(tmp_path) if n != ".lock") == ["alice"]
    fresh = VoiceStore(tmp_path, encode=no_encoder, width=12)
    assert fresh.errors == [] and [v.name for v in fresh.list()] == ["alice"]
    assert whole(fresh.get("alice")) and fresh.get("alice").text == "take 5"


# ----- symbolic links ------------------------------------------------------------------------------------
def test_a_symlinked_entry_is_not_followed_and_is_removed_for_good(tmp_path):
    outside, directory = tmp_path / "outside", tmp_path / "voices"
    VoiceStore(outside, encode=no_encoder, width=12).add("mallory", take(3), text="take 3")
    directory.mkdir()
    (directory / "mallory").symlink_to(outside / "mallory", target_is_directory=True)
    (directory / "eve").mkdir()  # a real entry whose codes are a link out of the store
    (directory / "eve" / "meta.json").write_text('{"format": 1, "name": "eve", "text": "take 3"}')
    (directory / "eve" / "codes.npy").symlink_to(outside / "mallory" / "codes.npy")
    store = VoiceStore(directory, encode=no_encoder, width=12)
    assert store.list() == [] and sorted(e.split(":")[0] for e in store.errors) == ["eve", "mallory"]
    assert "symbolic link" in next(e for e in store.errors if e.startswith("mallory"))
    for name in ("mallory", "eve"):
        with pytest.raises(VoiceError, match=f"voice: the stored entry '{name}'"):
            store.get(name)
        assert name not in store
    store.remove("mallory")
    assert not os.path.lexists(directory / "mallory")
    assert whole(VoiceStore(outside, encode=no_encoder, width=12).get("mallory"))  # the link's target is untouched
    restarted = VoiceStore(directory, encode=no_encoder, width=12)
    assert [e.split(":")[0] for e in restarted.errors] == ["eve"] and "mallory" not in restarted


def test_a_dangling_symlink_is_a_voice_error_and_can_be_replaced_or_removed(tmp_path):
    (tmp_path / "ghost").symlink_to(tmp_path / "nowhere")
    (tmp_path / "shade").symlink_to(tmp_path / "nowhere")
    store = VoiceStore(tmp_path, encode=no_encoder, width=12)
    assert sorted(e.split(":")[0] for e in store.errors) == ["ghost", "shade"]
    with pytest.raises(VoiceError, match="symbolic link"):
        store.get("ghost")
    with pytest.raises(VoiceExists):
        store.add("ghost", take(2), text="take 2")
    assert store.add("ghost", take(2), text="take 2", replace=True).name == "ghost"
    assert not (tmp_path / "ghost").is_symlink() and whole(store.get("ghost"))
    store.remove("shade")
    assert not os.path.lexists(tmp_path / "shade") and not (tmp_path / "nowhere").exists()
    restarted = VoiceStore(tmp_path, encode=no_encoder, width=12)
    assert restarted.errors == [] and [v.name for v in restarted.list()] == ["ghost"]


# ----- replace -------------------------------------------------------------------------------------------
def test_a_taken_name_is_refused_unless_replacing_across_stores(tmp_path):
    first, second = VoiceStore(tmp_path, encode=no_encoder, width=12), VoiceStore(tmp_path, encode=no_encoder, width=12)
    first.add("alice", take(1), text="take 1")
    for store in (first, second):
        with pytest.raises(VoiceExists, match="voice: a voice named 'alice' is stored already"):
            store.add("alice", take(2))
    assert second.get("alice").text == "take 1" and whole(first.get("alice"))
    with pytest.raises(VoiceError, match="replace: must be True or False"):
        second.add("alice", take(2), replace="yes")
    second.add("alice", take(4), text="take 4", replace=True)
    assert first.get("alice").text == "take 4" and whole(first.get("alice"))  # the other store sees it
    first.remove("alice")
    assert "alice" not in second and second.list() == []


@pytest.fixture(scope="module")
def speaker_wav(tmp_path_factory) -> Path:
    t = np.arange(48000) / 48000
    path = tmp_path_factory.mktemp("audio") / "speaker.wav"
    sf.write(path, 0.3 * np.sin(2 * np.pi * 150 * t), 48000)
    return path


def test_the_cli_refuses_a_taken_name_unless_replace(tmp_path, speaker_wav, capsys):
    store = ["--voices-dir", str(tmp_path)]
    assert main(["voices", *store, "add", "alice", str(speaker_wav), "--text", "Hello."]) == 0
    capsys.readouterr()
    assert main(["voices", *store, "add", "alice", str(speaker_wav)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [f"error: voices add: a voice named 'alice' is stored already in {tmp_path}; "
                                "pass --replace to replace it"]
    assert VoiceStore(tmp_path, encode=no_encoder, width=12).get("alice").text == "Hello."
    assert main(["voices", *store, "add", "alice", str(speaker_wav), "--replace"]) == 0
    assert json.loads(capsys.readouterr().out)["text"] is None
    assert VoiceStore(tmp_path, encode=no_encoder, width=12).get("alice").text is None


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    rt = Runtime.from_card(CARD, device="cpu", voices_dir=str(tmp_path_factory.mktemp("served-voices")))
    try:
        with ThreadedServer(create_app(rt, ServerConfig.for_card(CARD))) as live:
            yield rt, live.url
    finally:
        rt.close()


def test_http_answers_409_for_a_taken_name_unless_the_form_says_replace(server, speaker_wav):
    rt, url = server
    audio = {"audio_sample": ("v.wav", speaker_wav.read_bytes(), "audio/wav")}
    r = httpx.post(url + "/v1/audio/voices", files=audio, data={"name": "alice", "ref_text": "First."}, timeout=120)
    assert r.status_code == 200, r.text
    r = httpx.post(url + "/v1/audio/voices", files=audio, data={"name": "alice", "ref_text": "Second."}, timeout=120)
    assert r.status_code == 409 and set(r.json()) == {"error"}
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == "name" and error["code"] == "voice_exists" and "replace=true" in error["message"]
    assert rt.voices.get("alice").text == "First."
    r = httpx.post(url + "/v1/audio/voices", files=audio, data={"name": "alice", "ref_text": "Second.",
                                                                "replace": "true"}, timeout=120)
    assert r.status_code == 200, r.text
    assert rt.voices.get("alice").text == "Second."


# ----- printing ------------------------------------------------------------------------------------------
def test_a_voice_prints_as_a_summary(tmp_path):
    store = VoiceStore(tmp_path, encode=no_encoder, width=12)
    voice = store.add("alice", np.ones((1000, 12), np.int64), text="A long transcript. " * 20)
    text = repr(voice)
    assert text.startswith("Voice(name='alice', frames=1000, text='A long transcript.") and len(text) < 160
    assert "array" not in text and str(tmp_path) in repr(store)


def test_voices_list_is_a_table_or_json_lines(tmp_path, speaker_wav, capsys):
    store = ["--voices-dir", str(tmp_path)]
    assert main(["voices", *store, "list"]) == 0
    assert capsys.readouterr().out.strip() == f"no stored voices in {tmp_path}"
    VoiceStore(tmp_path, encode=no_encoder, width=12).add("bob", take(3), text="Hi,\nI am Bob.")
    VoiceStore(tmp_path, encode=no_encoder, width=12).add("alice", take(12))
    assert main(["voices", *store, "list"]) == 0
    lines = capsys.readouterr().out.rstrip("\n").splitlines()
    assert lines[0].split() == ["NAME", "FRAMES", "ADDED", "TEXT"] and len(lines) == 3
    assert lines[1].split()[:2] == ["alice", "6"] and lines[1].endswith("  -")
    assert lines[2].split()[:2] == ["bob", "4"] and lines[2].endswith("  Hi, I am Bob.")
    assert len({line.index(" 6 ") if " 6 " in line else line.index(" 4 ") for line in lines[1:]}) == 1
    assert main(["voices", *store, "list", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert [(r["name"], r["frames"], r["text"]) for r in rows] == [("alice", 6, None), ("bob", 4, "Hi,\nI am Bob.")]
