"""`v2 serve --replicas N` gives its replicas the settings `v2 serve` gives its one runtime: every option the
server's config reads (v2/server/options.py) reaches the replicas' `ServerConfig`, and the logging options
uvicorn takes with one runtime reach Serve's logging config. No Ray is started: the deployment is stopped
where it would be built, holding what it was given."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray", reason="the replicas path needs Ray: pip install -e \".[ray,server]\"")
pytest.importorskip("fastapi", reason="the server needs its extra: pip install v2[server]")

from v2.cli import build_parser  # noqa: E402
from v2.cluster import serve as cluster_serve  # noqa: E402
from v2.server.state import ServerConfig  # noqa: E402

CARD = "moss_tts_local_tiny"


class Built(Exception):
    def __init__(self, kw: dict[str, Any]) -> None:
        self.config, self.kw = kw["config"], kw


def _deployment(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> tuple[Built, Any]:
    args = build_parser().parse_args(["serve", "--card", CARD, "--replicas", "2", *argv])

    def deployment(card: str, **kw: Any) -> Any:
        raise Built(kw)

    monkeypatch.setattr(cluster_serve, "start_ray", lambda show_logs: None)
    monkeypatch.setattr(cluster_serve.ray, "cluster_resources", lambda: {})
    monkeypatch.setattr(cluster_serve, "deployment", deployment)
    with pytest.raises(Built) as built:
        cluster_serve.run(args)
    return built.value, args


def _replica_config(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> tuple[ServerConfig, Any]:
    built, args = _deployment(monkeypatch, argv)
    return built.config, args


def test_every_config_option_reaches_the_replicas(monkeypatch, tmp_path: Path):
    argv = ["--served-model-name", "a", "b", "--no-openai-aliases", "--api-key", "k", "--allow-origin",
            "https://app.example/", "--max-body-mb", "2", "--max-input-chars", "99", "--max-batch-items", "3",
            "--ws-config-timeout", "4.5", "--allowed-local-media-path", str(tmp_path), "--checkpoint", str(tmp_path)]
    config, args = _replica_config(monkeypatch, argv)
    assert config == ServerConfig.from_options(CARD, args)  # what one runtime's `v2 serve` builds
    default = ServerConfig.for_card(CARD)
    changed = {f.name for f in dataclasses.fields(ServerConfig) if getattr(config, f.name) != getattr(default, f.name)}
    assert changed == {"model_names", "api_key", "allowed_origins", "max_body_bytes", "max_input_chars",
                       "max_batch_items", "ws_config_timeout_s", "allowed_media_path", "seeded_noise"}
    assert config.ws_config_timeout_s == 4.5 and config.max_batch_items == 3 and config.max_body_bytes == 2 * 2**20
    assert config.model_names == ("a", "b", CARD) and config.allowed_origins == ("https://app.example",)


def test_the_replicas_defaults_are_the_servers(monkeypatch):
    config, _ = _replica_config(monkeypatch, [])
    assert config == ServerConfig.for_card(CARD, api_key=config.api_key)  # $V2_API_KEY may set the key


@pytest.mark.parametrize("argv, level, access", [([], "INFO", True),
                                                 (["--log-level", "warning", "--no-access-log"], "WARNING", False)])
def test_the_logging_options_reach_serves_logging_config(monkeypatch, argv, level, access):
    from ray.serve.schema import LoggingConfig

    built, _ = _deployment(monkeypatch, argv)
    logging = built.kw["logging_config"]
    assert logging == {"log_level": level, "enable_access_log": access}
    assert LoggingConfig(**logging).log_level == level  # Serve takes it as given
