"""What users read: numbers in error messages are plain Python numbers, never numpy reprs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from idealized_runtime.core.errors import InputError, plain
from idealized_runtime.cost_model.fitting.file_rows import parse_seconds, parse_token_count
from idealized_runtime.cost_model.fitting.request_logs import RequestTable


@given(st.integers(-(2**62), 2**62), st.floats(allow_nan=False))
def test_plain_turns_numpy_scalars_into_python_numbers(integer: int, real: float) -> None:
    assert repr(plain(np.int64(integer))) == repr(integer)
    assert repr(plain(np.float64(real))) == repr(real)
    assert plain("x") == "x" and plain(3) == 3
    array = np.arange(3)
    assert plain(array) is array  # arrays are not scalars: left alone


def test_token_count_errors_show_plain_numbers() -> None:
    with pytest.raises(InputError) as error:
        RequestTable.from_columns(["m", "m"], np.array([4, 0]), np.array([1, 1]))
    assert "got 0" in str(error.value) and "np." not in str(error.value)
    with pytest.raises(InputError) as error:
        RequestTable.from_columns(["m"], np.array([1.5]), np.array([1]))
    assert "got 1.5" in str(error.value) and "np." not in str(error.value)


@pytest.mark.parametrize("value", [np.float64(-1.0), np.int64(-2), np.float32(-0.5)])
def test_scalar_parsers_show_plain_numbers(value: object) -> None:
    for parse in (parse_seconds, parse_token_count):
        with pytest.raises(InputError) as error:
            parse(value, path="p", row=1, column="c")
        assert "np." not in str(error.value)
