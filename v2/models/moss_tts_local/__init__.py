"""MOSS-TTS-Local: the model (Qwen3 backbone + local transformer, `model.py`), its config, checkpoint loader,
prompt layout and tokenizers, the host frame sampler and the plain reference loop (`generate.py`)."""
