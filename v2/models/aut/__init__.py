"""AuT, the audio encoder that more than one release shares (an omni model's thinker, a forced aligner): its
config (`config.py`), its Whisper log-mel features (`features.py`) and the encoder (`encoder.py`). A shared
building block: it knows no family, tokens or prompts."""
