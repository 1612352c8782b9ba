"""Hypothesis strategies for the whole accepted sampling domain (edges first: hypothesis shrinks towards them
and always tries some), shared by both families' rollout == recompute tests."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from v2.fields import PENALTY_MAX, PENALTY_MIN, TEMPERATURE_MAX, TEMPERATURE_MIN, TOP_K_MAX

temperature = st.one_of(st.sampled_from([0.0, TEMPERATURE_MIN, TEMPERATURE_MAX, np.nextafter(TEMPERATURE_MIN, 1.0)]),
                        st.floats(TEMPERATURE_MIN, TEMPERATURE_MAX))
top_k = st.one_of(st.sampled_from([0, 1, 2, 25, TOP_K_MAX]), st.integers(0, 2000))
top_p = st.one_of(st.sampled_from([1.0, 1e-30, 0.5]), st.floats(1e-30, 1.0, exclude_min=False))
penalty = st.one_of(st.sampled_from([PENALTY_MIN, 1.0, PENALTY_MAX]), st.floats(PENALTY_MIN, PENALTY_MAX))
head = st.fixed_dictionaries({"temperature": temperature, "top_k": top_k, "top_p": top_p})
