"""Both readers of perf.data make the same model of every committed capture: the
native reader against perf script's text, read whole and in slices."""

from __future__ import annotations

import pytest

from tests.fixtures import HERE
from tests.native_compare import first_difference, model_difference

CAPTURES = sorted(path.parent.name for path in HERE.glob("*/perf.data"))


@pytest.mark.parametrize("name", CAPTURES)
@pytest.mark.parametrize("slices", [1, 2])
def test_both_readers_make_the_same_model(perf: str, name: str, slices: int) -> None:
    difference = model_difference(HERE / name, slices)
    if difference is not None:  # say where the events part, not only where the models do
        pytest.fail(f"{difference}; first event apart: {first_difference(perf, HERE / name / 'perf.data')}")
