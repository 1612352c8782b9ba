"""Tests of v2.cluster on a real local Ray cluster."""
