"""The cascade's band: fixed on the labelled claims' probabilities, inclusive, the whole range at a share of 1."""

from __future__ import annotations

import numpy as np
import pytest

from checkworthy.method.cascade import band_half_width, in_band


def test_the_band_holds_the_share_of_the_labelled_probabilities() -> None:
    p = np.array([0.5, 0.45, 0.6, 0.3, 0.9, 0.05, 0.52, 0.7, 0.2, 0.99])
    width = band_half_width(p, 0.3)
    assert width == pytest.approx(0.05)
    assert in_band(p, width).tolist() == [True, True, False, False, False, False, True, False, False, False]
    assert band_half_width(p, 1.0) == 0.5 and in_band([0.0, 1.0], 0.5).all()
    assert not in_band([0.2, 0.8], -1.0).any()  # a negative width sends nothing


@pytest.mark.parametrize(("p", "share", "message"), [
    ([0.4, 0.6], 0.0, "share must lie in"),
    ([0.4, 0.6], 1.5, "share must lie in"),
    ([0.4, np.nan], 0.5, "finite and not empty"),
    ([], 0.5, "finite and not empty"),
])
def test_a_band_it_cannot_fix_is_refused(p, share, message) -> None:
    with pytest.raises(ValueError, match=message):
        band_half_width(p, share)
