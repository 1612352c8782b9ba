"""`python -m v2.bench.launches --family qwen3_tts` (and `--card qwen3_tts_tiny`): a Qwen3-TTS frame step's launches at
the release's dims (one count per size, shared by the tests that read it)."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from v2.bench.launches import main as launches
from v2.families.qwen3_tts.bench.launches import SIZES, release_model
from v2.families.qwen3_tts.shapes import SHAPES
from v2.models import kernels
from v2.models.qwen3_tts.config import Qwen3TTSConfig


@pytest.mark.parametrize("size", sorted(SIZES))
def test_release_shapes_parse_into_the_published_sizes(size):
    cfg = Qwen3TTSConfig.from_dict(json.loads(SHAPES.joinpath(SIZES[size]).read_text()))
    t, c = cfg.talker.decoder, cfg.code_predictor.decoder
    assert cfg.num_code_groups == 16 and cfg.talker.vocab_size == 3072 and cfg.code_predictor.codebook_size == 2048
    assert (t.num_layers, t.num_heads, t.num_kv_heads, t.head_dim) == (28, 16, 8, 128)
    assert (c.num_layers, c.hidden_size, c.intermediate_size) == (5, 1024, 3072)
    assert cfg.model_size == {"1.7b": "1b7", "0.6b": "0b6"}[size] and len(cfg.speakers) == 9
    model = release_model(size)  # meta device: no memory
    params = sum(p.numel() for p in model.parameters())
    projected = type(model.talker.code_predictor.small_to_mtp_projection).__name__ == "Linear"
    assert projected == (size == "1.7b")  # the 0.6B talker is as wide as its code predictor
    assert (1.8e9 < params < 2.0e9) if size == "1.7b" else (0.85e9 < params < 0.95e9)


@pytest.fixture(scope="module")
def counted() -> dict[str, tuple[dict, str]]:
    """One count per release size, made once for this module's tests: 0.6b's through the tiny card (its family
    picked from the card) at buckets 1, 2, 16 and 64, 1.7b's by family name at 1, 16 and 64, at the default
    context; each size's JSON line and the per-kernel table (stderr)."""
    if kernels.triton is None:
        pytest.skip("needs triton")
    runs = {"0.6b": ["--card", "qwen3_tts_tiny", "--size", "0.6b", "--buckets", "1", "2", "16", "64"],
            "1.7b": ["--family", "qwen3_tts", "--size", "1.7b", "--buckets", "1", "16", "64"]}
    out = {}
    for size, argv in runs.items():
        stdout, stderr = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            assert launches(argv) == 0
        out[size] = (json.loads(stdout.getvalue().strip().splitlines()[-1]), stderr.getvalue())
    return out


def test_one_frame_step_routes_every_layer_to_its_kernel_and_splits_into_parts(counted):
    out, err = counted["0.6b"]
    assert out["family"] == "qwen3_tts" and out["sizes"] == ["0.6b"] and out["dims"] == "release"
    (row,) = [r for r in out["buckets"] if r["bucket"] == 2]
    assert row["size"] == "0.6b"
    talker, predictor, steps = 28, 5, 15  # layers, layers, code-predictor steps (the first one takes two rows)
    assert row["triton"] == {
        "rms_norm": 2 * talker + 1 + steps * 2 * predictor + 1,  # the talker's; each residual add's; the first input
        "embed_rms_norm": steps + 1,  # each code's row (the next input's norm: 0.6B has no projection) and the sum
        "frame_attention": steps * predictor, "gate_up": steps * predictor,  # the code predictor's attention, MLP
        "qk_rope": talker, "silu_mul": talker, "split": talker,  # the talker's decode row
        "sample": steps + 1}  # one launch a draw
    for label in ("torch", "kernels"):
        assert sum(row[f"{label}_parts"].values()) == row[f"{label}_launches"] == sum(row[f"{label}_ops"].values())
        assert all(n > 0 for n in row[f"{label}_parts"].values())
    assert row["kernels_parts"]["code_predictor"] < row["torch_parts"]["code_predictor"] / 8
    assert row["kernels_parts"]["talker"] < row["torch_parts"]["talker"] / 3
    assert row["kernels_parts"]["sampling"] == steps + 1
    assert row["kernels_ops"]["mm"] + row["triton"]["gate_up"] == row["torch_ops"]["mm"]  # gate/up inside its kernel
    assert "triton:frame_attention" in err  # the per-kernel table


@pytest.mark.parametrize("size", sorted(SIZES))
def test_a_frame_step_launches_at_most_900_kernels_at_every_bucket(size, counted):
    out, _ = counted[size]
    rows = out["buckets"]
    assert out["sizes"] == [size] and all(r["size"] == size for r in rows)
    assert [r["bucket"] for r in rows] == ([1, 2, 16, 64] if size == "0.6b" else [1, 16, 64])
    assert all(r["kernels_launches"] <= 900 for r in rows), [(r["bucket"], r["kernels_launches"]) for r in rows]


def test_a_card_picks_its_family_and_an_unknown_family_is_refused(counted, capsys):
    out, _ = counted["0.6b"]  # counted with --card qwen3_tts_tiny and no --family
    assert out["family"] == "qwen3_tts" and out["sizes"] == ["0.6b"] and out["buckets"][0]["kernels_launches"] > 0
    with pytest.raises(SystemExit) as e:
        launches(["--family", "no_such_family"])
    assert e.value.code == 2 and "unknown family 'no_such_family'" in capsys.readouterr().err
