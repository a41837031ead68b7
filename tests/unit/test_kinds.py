"""The capture kinds (offcpu.kinds), on recorded fixtures: which kind a capture is, what ties a
saved model to its files, which reader reads it, and that its files are its capture.json's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from offcpu.capture import BPF_RECORDS, load
from offcpu.errors import OffcpuError
from offcpu.kinds import BPF, PERF, PLAIN, PlainPerfData, kind_of
from offcpu.reading.native_reader import unsupported
from tests.conftest import ROOT

PERF_CAPTURE = ROOT / "tests" / "fixtures" / "lock_chain"  # recorded with perf, before capture.json said so
BPF_CAPTURE = ROOT / "tests" / "fixtures" / "python_lock_bpf"


def copied(capture: Path, tmp_path: Path) -> Path:
    directory = tmp_path / capture.name
    shutil.copytree(capture, directory, ignore=shutil.ignore_patterns("model.json"))
    return directory


def test_a_capture_is_of_the_kind_that_recorded_it():
    assert kind_of(load(PERF_CAPTURE)) is PERF  # no backend in its capture.json: perf's, as before BPF
    assert kind_of(load(BPF_CAPTURE)) is BPF


def test_a_perf_data_alone_is_plain_but_not_in_its_capture(tmp_path):
    alone = tmp_path / "perf.data"
    shutil.copyfile(PERF_CAPTURE / "perf.data", alone)
    assert PlainPerfData.at(alone)
    assert not PlainPerfData.at(PERF_CAPTURE / "perf.data")  # its capture.json is beside it
    assert not PlainPerfData.at(PERF_CAPTURE)  # a directory
    (tmp_path / "other").write_bytes(b"PERFILE")  # one byte short of the magic
    assert not PlainPerfData.at(tmp_path / "other")


def test_a_copy_is_the_same_recording_and_changed_records_are_not(tmp_path):
    perf, bpf = copied(PERF_CAPTURE, tmp_path), copied(BPF_CAPTURE, tmp_path)
    assert PERF.identity(perf) == PERF.identity(PERF_CAPTURE)
    assert BPF.identity(bpf) == BPF.identity(BPF_CAPTURE)
    records = bytearray((bpf / BPF_RECORDS).read_bytes())
    records[-1] ^= 0xFF  # the last record's last byte
    (bpf / BPF_RECORDS).write_bytes(bytes(records))
    assert BPF.identity(bpf) != BPF.identity(BPF_CAPTURE)
    (perf / "perf.data").write_bytes(b"")
    with pytest.raises(OffcpuError, match="is empty; record it again"):
        PERF.identity(perf)


def test_each_kind_names_its_reader_and_why():
    assert (PERF.reader(PERF_CAPTURE, None, unsupported).reader, PERF.reader(PERF_CAPTURE, None, unsupported).why) \
        == ("native", "perf.data read directly")
    assert PERF.reader(PERF_CAPTURE, "perf-script", unsupported).why == "--reader perf-script"
    assert PLAIN.reader(PERF_CAPTURE / "perf.data", None, unsupported).kernel_symbols is None  # none saved
    assert BPF.reader(BPF_CAPTURE, None, unsupported).reader == "bpf"
    with pytest.raises(OffcpuError, match="--reader native reads a perf.data.*leave out --reader"):
        BPF.reader(BPF_CAPTURE, "native", unsupported)


def test_a_perf_data_of_another_recording_is_refused(tmp_path):
    capture = copied(PERF_CAPTURE, tmp_path)
    info = json.loads((capture / "capture.json").read_text())
    info["perf_command"] = [*info["perf_command"][:-2], "--pid", "1"]
    (capture / "capture.json").write_text(json.dumps(info))
    with pytest.raises(OffcpuError, match="is another recording than the one capture.json beside it describes"):
        PERF.check(capture, load(capture))
    PERF.check(PERF_CAPTURE, load(PERF_CAPTURE))  # its own is its own


def test_bpf_records_without_one_whole_record_hold_nothing(tmp_path):
    capture = copied(BPF_CAPTURE, tmp_path)
    assert not BPF.holds_nothing(capture, load(capture))
    (capture / BPF_RECORDS).write_bytes(b"\0" * 7)
    assert BPF.holds_nothing(capture, load(capture))
