"""The family kit: the building blocks a family package is made of (the paged AR sequence and its loop, the
frame executor's plumbing, the chunk stream and the codec executor's plumbing, the paged-family base, the
result pieces, the submit checks families make alike).

Imported by families only (v2/families/*, a family installed elsewhere, a test family); the engine core
(v2/runtime/) never imports it. It builds on the core's seam (v2/runtime/family.py) and device layer.
"""
