"""The voice store: named voices kept on disk (store.py), its files and lock (files.py), the named arrays a
voice carries besides its codes (arrays.py).

Knows no engine, model or family: what to check a voice against is handed to it.
"""
