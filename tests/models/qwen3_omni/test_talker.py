"""The Qwen3-Omni talker against the reference: the hand-off rows from the stored thinker arrays (E, A), the
greedy talker + code predictor loop (codes exact; logits, hidden states and fed rows within the README's
1e-4), the code predictor alone from the stored talker states, batched == alone, and refusals naming their field.
The thinker's own code is not used: its outputs are the stored arrays."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.models.qwen3_omni.conftest import CHECKPOINT, KEYS
from v2.models.config import ConfigError
from v2.models.qwen3_omni.config import Qwen3OmniConfig, TalkerDefaults
from v2.models.qwen3_omni.talker import OmniTalker, talker_sampling
from v2.models.qwen3_omni.talker_handoff import talker_prefix, trailing_rows, user_positions
from v2.models.qwen3_tts.config import Qwen3TTSSampling
from v2.models.qwen3_tts.generate import Qwen3Generation, generate_batch
from v2.models.qwen3_tts.sampling import Qwen3TTSSamplingTensors
from v2.models.weights import open_weights

TOL = dict(atol=1e-4, rtol=1e-4)
GREEDY = Qwen3TTSSampling.greedy(1.05)  # the reference's talker: argmax after its repetition penalty


@pytest.fixture(scope="module")
def talker(oconfig: dict) -> OmniTalker:
    m = OmniTalker.from_pretrained(CHECKPOINT)
    ids = Qwen3OmniConfig.from_dict(oconfig).ids
    with open_weights(CHECKPOINT / "model.safetensors") as f:
        table = f.get_tensor("thinker.model.embed_tokens.weight")
    m.set_special_text(table[[ids.tts_bos, ids.tts_eos, ids.tts_pad]].float())
    return m


def _run(talker: OmniTalker, oref: dict, keys: tuple[str, ...], cap: int,
         sampling: Qwen3TTSSampling = GREEDY, seeds: tuple[int, ...] = ()) -> list[Qwen3Generation]:
    prefix = [torch.from_numpy(oref[f"{k}_talker_prefix_embeds"]) for k in keys]
    trailing = [torch.from_numpy(oref[f"{k}_talker_trailing_text"]) for k in keys]
    return generate_batch(talker, prefix, trailing, [sampling] * len(keys), list(seeds or [0] * len(keys)),
                          max_new_tokens=cap, min_new_tokens=0)


def test_special_rows(talker: OmniTalker, oref: dict) -> None:
    rows = talker.special_text_rows().numpy()
    for i, name in enumerate(("tts_bos_embed", "tts_eos_embed", "tts_pad_embed")):
        np.testing.assert_allclose(rows[i], oref[name], **TOL)


@pytest.mark.parametrize("key", KEYS)
def test_handoff_rows(talker: OmniTalker, oref: dict, ometa: dict, oconfig: dict, key: str) -> None:
    meta = next(p for p in ometa["prompts"] if p["key"] == key)
    ids = Qwen3OmniConfig.from_dict(oconfig).ids
    prompt = oref[f"{key}_thinker_input_ids"].tolist()
    e, a = torch.from_numpy(oref[f"{key}_thinker_embed"]), torch.from_numpy(oref[f"{key}_thinker_accept_hidden"])
    t = len(prompt)
    with torch.no_grad():
        prefix = talker_prefix(talker, prompt, e, a, e[t], talker.speaker_id(meta["speaker"]), ids)
        trailing = trailing_rows(talker, e[t + 1 :])  # gen_1 .. gen_(n-2): what the reference fed
    np.testing.assert_allclose(prefix.numpy(), oref[f"{key}_talker_prefix_embeds"], **TOL)
    np.testing.assert_allclose(trailing.numpy(), oref[f"{key}_talker_trailing_text"], **TOL)
    # the talker's positions are 0 .. Tp - 1 in all three M-RoPE components: plain RoPE
    pos = oref[f"{key}_talker_prefix_position_ids"]
    assert (pos == np.arange(pos.shape[1])).all()


def test_user_positions_drop_system_and_assistant_turns() -> None:
    ids = Qwen3OmniConfig.from_dict(_config()).ids
    s, u, a, n = ids.im_start, ids.user, ids.assistant, 198
    prompt = [s, ids.system, n, 7, ids.im_end, n, s, u, n, 8, ids.im_end, n, s, a, n, 9, ids.im_end, n, s, u, n, 10,
              ids.im_end, n, s, a, n]
    assert user_positions(prompt, ids) == [6, 7, 8, 9, 10, 11, 18, 19, 20, 21, 22, 23]


@pytest.mark.parametrize("key", KEYS)
def test_greedy_talker_matches_reference(talker: OmniTalker, oref: dict, ometa: dict, key: str) -> None:
    out = _run(talker, oref, (key,), ometa["talker_cap"])[0]
    np.testing.assert_array_equal(out.codes.numpy(), oref[f"{key}_codes"])
    np.testing.assert_array_equal(out.group0.numpy(), oref[f"{key}_talker_codes0_chosen"])
    np.testing.assert_allclose(out.logits0.numpy(), oref[f"{key}_talker_logits0"], **TOL)
    np.testing.assert_allclose(out.hidden.numpy(), oref[f"{key}_talker_hidden"], **TOL)
    np.testing.assert_allclose(out.rows.numpy(), oref[f"{key}_talker_step_embeds"], **TOL)
    np.testing.assert_allclose(out.cp_logits.numpy(), oref[f"{key}_cp_logits"], **TOL)


@pytest.mark.parametrize("key", KEYS)
def test_code_predictor_from_stored_states(talker: OmniTalker, oref: dict, key: str) -> None:
    """Groups 1..15 from the reference's h_f and c_0 alone (greedy), and the teacher-forced pass's rows/logits."""
    codes = torch.from_numpy(oref[f"{key}_codes"])
    hidden = torch.from_numpy(oref[f"{key}_talker_hidden"][: codes.shape[0]])
    st = Qwen3TTSSamplingTensors.build([GREEDY] * codes.shape[0], [0] * codes.shape[0])
    with torch.no_grad():
        frame = talker.predict_codes(hidden, codes[:, 0], st, torch.arange(codes.shape[0]))
        inputs, logits = talker.code_predictor_teacher(hidden, codes)
    np.testing.assert_array_equal(frame.codes.numpy(), oref[f"{key}_codes"])
    np.testing.assert_allclose(inputs.numpy(), oref[f"{key}_cp_inputs"], **TOL)
    np.testing.assert_allclose(logits.numpy(), oref[f"{key}_cp_logits"], **TOL)


@pytest.mark.exact
def test_batched_equals_alone(talker: OmniTalker, oref: dict) -> None:
    """All four prompts in one left-padded batch (one stops on EOS early) == each alone, bit for bit."""
    together = _run(talker, oref, KEYS, 12)
    for key, got in zip(KEYS, together):
        alone = _run(talker, oref, (key,), 12)[0]
        assert torch.equal(got.codes, alone.codes), key
        s = alone.logits0.shape[0]
        assert torch.equal(got.logits0[:s], alone.logits0), key
        assert torch.equal(got.cp_logits[: s - 1], alone.cp_logits), key


def _config() -> dict:
    import json

    return json.loads((CHECKPOINT / "config.json").read_text())


def test_refusals_name_their_field(talker: OmniTalker) -> None:
    ids = Qwen3OmniConfig.from_dict(_config()).ids
    with pytest.raises(ConfigError, match="speaker"):
        talker.speaker_id("nobody")
    assert talker.speaker_id("ETHAN") == 2302
    with pytest.raises(ValueError, match="thinker_rows"):
        talker.set_special_text(torch.zeros(2, 32))
    rows = torch.zeros(4, 32)
    with pytest.raises(ValueError, match="prompt_ids"):
        talker_prefix(talker, [ids.im_start, ids.user, 198, 5], rows, rows, rows[0], 2302, ids)
    with pytest.raises(ValueError, match="embed/accept"):
        talker_prefix(talker, [ids.im_start, ids.assistant, 198], rows[:2], rows, rows[0], 2302, ids)
    with pytest.raises(ValueError, match="project_text"):
        talker.embed_text(torch.tensor([1]))


def test_sampling_defaults_and_refusals() -> None:
    d = TalkerDefaults()
    s = talker_sampling(d)
    assert (s.talker.temperature, s.talker.top_k, s.talker.top_p, s.repetition_penalty) == (0.9, 50, 1.0, 1.05)
    assert (s.subtalker.temperature, s.subtalker.top_k, s.subtalker.top_p) == (1.0, 50, 0.8)
    assert talker_sampling(d, temperature=0) == GREEDY  # greedy mirrored onto the code predictor
    for field, kwargs in (("talker_temperature", dict(temperature=-1.0)), ("talker_top_k", dict(top_k=-2)),
                          ("talker_top_p", dict(top_p=0.0)), ("talker_repetition_penalty", dict(repetition_penalty=0.0)),
                          ("talker_temperature", dict(temperature=float("nan")))):
        with pytest.raises(ValueError, match=field):
            talker_sampling(d, **kwargs)  # type: ignore[arg-type]


@pytest.mark.exact
def test_sampled_batched_equals_alone(talker: OmniTalker, oref: dict) -> None:
    """The release's sampling (seeded per row): the four prompts together == each alone, bit for bit."""
    s = talker_sampling(TalkerDefaults())
    seeds = (11, 12, 13, 14)
    together = _run(talker, oref, KEYS, 8, s, seeds)
    for key, seed, got in zip(KEYS, seeds, together):
        alone = _run(talker, oref, (key,), 8, s, (seed,))[0]
        assert torch.equal(got.codes, alone.codes), key
        assert torch.equal(got.logprobs[: alone.logprobs.shape[0]], alone.logprobs), key


@pytest.mark.parametrize("key,seed", [("a", 1), ("d", 2), ("b", 0)])
def test_rollout_equals_teacher_forced_recompute(talker: OmniTalker, oref: dict, key: str, seed: int) -> None:
    """Qwen3-TTS's teacher-forced recompute (one causal talker pass, one code-predictor pass per frame) runs on the
    Omni talker unchanged: the rollout's logprobs (release sampling; greedy for b, which stops on EOS) again."""
    from v2.families.qwen3_tts.recompute import logprobs

    s = GREEDY if key == "b" else talker_sampling(TalkerDefaults())
    out = _run(talker, oref, (key,), 12, s, (seed,))[0]
    with torch.no_grad():
        again = logprobs(talker, torch.from_numpy(oref[f"{key}_talker_prefix_embeds"]),
                         torch.from_numpy(oref[f"{key}_talker_trailing_text"]), out.codes, s, min_frames=0,
                         final_stop=out.stopped)
    assert out.stopped == (key == "b")
    rolled = out.logprobs if out.stopped else out.logprobs[: out.codes.shape[0]]
    assert again.shape == rolled.shape
    torch.testing.assert_close(again, rolled, atol=1e-5, rtol=1e-5)


def release_dims(oconfig: dict) -> Qwen3OmniConfig:
    """The config at the release's widths (README "Release values") for the talker, code predictor and code2wav."""
    from tests.models.qwen3_omni.test_config_and_loading import _release_schema

    d = _release_schema(oconfig)
    d["thinker_config"]["text_config"].update(hidden_size=2048, num_hidden_layers=48)
    d["thinker_config"]["audio_config"].update(output_dim=2048)
    d["talker_config"].update(thinker_hidden_size=2048, accept_hidden_layer=24)
    d["talker_config"]["text_config"].update(hidden_size=1024, num_hidden_layers=20, num_attention_heads=16,
                                             num_key_value_heads=2, intermediate_size=2048, moe_intermediate_size=384,
                                             num_local_experts=128, num_experts_per_tok=6,
                                             shared_expert_intermediate_size=768)
    d["talker_config"]["code_predictor_config"].update(hidden_size=1024, num_hidden_layers=5, num_attention_heads=16,
                                                       num_key_value_heads=8, head_dim=128, intermediate_size=3072)
    d["code2wav_config"].update(hidden_size=1024, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=16,
                                intermediate_size=3072, decoder_dim=1536)
    return Qwen3OmniConfig.from_dict(d)


def test_release_dims_layout_on_meta(oconfig: dict) -> None:
    """The talker at the release's widths, on the meta device: the release's key names and shapes."""
    from v2.models.qwen3_omni.loader import release_layout
    from v2.models.weights import empty_model

    model = empty_model(OmniTalker, release_dims(oconfig))
    shapes = {k: v.shape for k, v in release_layout(model.talker).items()}
    assert shapes["model.layers.19.mlp.experts.127.gate_proj.weight"] == (384, 1024)
    assert shapes["model.layers.19.mlp.experts.127.down_proj.weight"] == (1024, 384)
    assert shapes["model.layers.0.mlp.gate.weight"] == (128, 1024)
    assert shapes["model.layers.0.mlp.shared_expert.up_proj.weight"] == (768, 1024)
    assert shapes["model.layers.0.mlp.shared_expert_gate.weight"] == (1, 1024)
    assert shapes["model.layers.0.self_attn.q_proj.weight"] == (2048, 1024)
    assert shapes["model.layers.0.self_attn.k_proj.weight"] == (256, 1024)
    assert shapes["text_projection.linear_fc1.weight"] == (2048, 2048)
    assert shapes["hidden_projection.linear_fc2.weight"] == (1024, 2048)
    assert shapes["model.codec_embedding.weight"] == shapes["codec_head.weight"] == (3072, 1024)
    assert shapes["code_predictor.model.layers.4.self_attn.k_proj.weight"] == (1024, 1024)
    assert shapes["code_predictor.model.layers.4.mlp.gate_proj.weight"] == (3072, 1024)
    assert shapes["code_predictor.lm_head.14.weight"] == shapes["code_predictor.model.codec_embedding.14.weight"]
    assert not any("text_embedding" in k or "small_to_mtp" in k for k in shapes)
