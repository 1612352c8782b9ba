"""Qwen3-TTS (12 Hz): talker + code predictor + speaker encoder, the prompt builder and the reference loop."""
