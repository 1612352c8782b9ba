"""v2: a step-scheduled multi-loop runtime for dual-AR text-to-speech."""

__version__ = "0.1.0"
