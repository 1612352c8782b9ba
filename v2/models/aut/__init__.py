"""AuT, the audio encoder that Qwen3-Omni's thinker and Qwen3-ForcedAligner share: its config (`config.py`), its
Whisper log-mel features (`features.py`) and the encoder (`encoder.py`). A shared building block: it knows no
family, tokens or prompts."""
