"""A panic of the compiled core (a crate's assertion on a perf.data it did not expect) is no
finding and no traceback: the reader says in one line that the file cannot be read."""

from __future__ import annotations

from pathlib import Path

import pytest

from offcpu import _core
from offcpu.errors import OffcpuError
from offcpu.reading import native_reader


def test_a_panic_of_the_core_is_a_one_line_error_about_the_file(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    def panics(path: str) -> _core.PerfData:
        raise _core.PanicException("range end index 9 out of range for slice of length 8")

    monkeypatch.setattr(_core, "PerfData", panics)
    path = tmp_path / "perf.data"
    with pytest.raises(OffcpuError) as raised:
        native_reader.open_perf_data(path)
    message = str(raised.value)
    assert message.startswith(f"{path} is not a readable perf.data (") and "out of range" in message
    assert "\n" not in message


def test_the_panic_exception_is_the_one_pyo3_raises() -> None:
    assert _core.PanicException.__module__ == "pyo3_runtime" and issubclass(_core.PanicException, BaseException)
