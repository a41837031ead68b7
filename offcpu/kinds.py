"""The kinds of capture offcpu reads, one object each: a perf.data that `offcpu record` made
with perf (PERF), the records of offcpu's BPF programs (BPF), and a perf.data that perf
recorded alone (PLAIN). A kind knows its files, what ties a saved model to them (identity)
and that they are the recording capture.json describes, which reader reads them and why,
and how its counts and losses are said. Everything above asks the kind: no other module
compares capture.json's `backend`.

This module is at the bottom of the import order (docs/layout.md): it uses the compiled core
(which defines perf.data's magic and BPF's record) and the shared modules only, and names a
reader by the name it goes by (--reader) for offcpu.reading.readers to open.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shlex
import struct
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from offcpu import _core
from offcpu.capture import BPF_RECORDS, BPF_STACKS, KERNEL_SYMBOLS, METADATA, PERF_DATA, VDSO_IMAGE, CaptureInfo
from offcpu.errors import OffcpuError, more_in
from offcpu.files import open_regular
from offcpu.workers import child_environment

SWITCH_TRACEPOINT = "sched:sched_switch"  # what off-CPU time comes from
RECORD_AGAIN = "record it again with 'offcpu record'"
# perf.data begins with its magic (reversed when written in the other byte order), the header's
# and an attribute's sizes, then where its attributes and its events are (offset and size
# each): perf's perf_file_header.
PERF_MAGIC = _core.PERF_MAGIC
PERF_MAGIC_SWAPPED = PERF_MAGIC[::-1]
PERF_HEADER = struct.Struct("<8sQQQQQQ")
EVENT_NAME = re.compile(r"^# event : name = ([^,]+),", re.MULTILINE)  # perf report --header-only: one per event
HASHED_MAX = 1 << 20  # of perf.data's header, of its features, of each end of BPF's records: never more
# The readers, by the names --reader and a model give them (offcpu.reading.readers)
NATIVE_READER, PERF_SCRIPT_READER, BPF_READER = "native", "perf-script", "bpf"
PERF_DATA_READERS = (NATIVE_READER, PERF_SCRIPT_READER)  # what --reader may choose
BPF_READER_WHY = "recorded with BPF"  # why a BPF capture is read by the BPF reader (a model says it)
Unsupported = Callable[[Path], "str | None"]


@dataclass(frozen=True)
class ReaderPlan:
    """Which reader reads a capture, and why (said in the report)."""

    reader: str  # one of the readers' names above
    why: str
    path: Path  # the file or directory it reads
    kernel_symbols: Path | None = None  # the saved kernel files, when the capture has them
    vdso: Path | None = None


class CaptureKind:
    """What every kind of capture answers; the kinds below fill it in."""

    name: ClassVar[str]  # capture.json's `backend` (what recorded it)
    said: ClassVar[str]  # its name in sentences
    saves_model: ClassVar[bool] = True  # a model.json is kept beside it
    # The kernel timed every switch where it happened: no switch-in is placed by a measured
    # cost, and no recorder's handling of switches is counted per thread (docs/numbers.md)
    timed_in_kernel: ClassVar[bool] = False
    reads_runtimes: ClassVar[bool] = False  # it reads the runtimes' own frames (Python's, Java's, Ruby's)
    lost_label: ClassVar[str] = "Lost events"  # in a table of the capture
    unreadable_units: ClassVar[str] = "events perf"

    def recorded(self, directory: Path) -> Path:
        """The file its events are in."""
        raise NotImplementedError

    def identity(self, directory: Path) -> dict:
        """What ties a saved model to this recording, a few KB to read whatever its size."""
        raise NotImplementedError

    def holds_nothing(self, directory: Path, info: CaptureInfo) -> bool:
        """Whether it holds no scheduler event at all."""
        return info.samples == 0

    def check(self, directory: Path, info: CaptureInfo) -> None:
        """OffcpuError when the files are not the recording capture.json describes."""

    def reader(self, directory: Path, forced: str | None, unsupported: Unsupported) -> ReaderPlan:
        """Which reader reads it (`forced`: the one --reader names), and why; `unsupported` is the
        core's word on a perf.data it cannot read (offcpu.reading.native_reader.unsupported)."""
        raise NotImplementedError

    def check_readable(self, perf: str, path: Path, info: CaptureInfo) -> None:
        """Before perf script reads it: OffcpuError when this machine cannot."""

    def recorded_counts(self, info: CaptureInfo) -> str:
        """What was recorded, counted as it counts it."""
        counts = f"{info.samples:,} event{'s' * (info.samples != 1)}"
        return f"{counts} (+{info.switch_records:,} switch records)"

    def lost_sentence(self, info: CaptureInfo, allowed: str) -> str:
        """What its lost events mean and what to do about them, with what is `allowed` said
        beside the share ("; a check allows 5%")."""
        pages = info.mmap_pages()
        bigger = f"--mmap-pages {pages * 4}" if pages else "--mmap-pages 1024"
        return (f"perf lost {info.lost_events:,} events ({info.lost_share:.1%}{allowed}), so some waits are missing "
                f"or cut short: record again with a bigger ring buffer, for example {bigger}, or a shorter "
                "--duration" + more_in("events-lost"))

    def unreadable_holder(self, info: CaptureInfo) -> str:
        """What holds the events offcpu could not read, as the subject of "holds ..."."""
        return f"this perf.data (perf {info.perf_version}) holds"

    def recorder_rows(self, info: CaptureInfo) -> list[tuple[str, str]]:
        """How it was recorded, as rows of a table (name, value)."""
        return [("perf command", shlex.join(info.perf_command)), ("perf version", info.perf_version)]


class PerfRecording(CaptureKind):
    """perf.data, recorded by `offcpu record` with perf."""

    name = said = "perf"

    def recorded(self, directory: Path) -> Path:
        return directory / PERF_DATA

    def identity(self, directory: Path) -> dict:
        """Its size and a hash of all perf wrote in it but the events (its header, the events'
        attributes with ids of their own, and at the end its features: the command line, the
        time of its first and last sample...). Not its modification time: a copy is the same
        recording."""
        perf_data = self.recorded(directory)
        try:
            with open_regular(perf_data) as file:
                size = os.fstat(file.fileno()).st_size
                header = file.read(PERF_HEADER.size)
                digest = hashlib.sha256(header)
                if len(header) == PERF_HEADER.size and header.startswith(PERF_MAGIC):
                    data_offset, data_size = PERF_HEADER.unpack(header)[-2:]
                    digest.update(file.read(min(max(data_offset - PERF_HEADER.size, 0), HASHED_MAX)))
                    file.seek(min(data_offset + data_size, size))  # a damaged header may point anywhere
                    digest.update(file.read(HASHED_MAX))
        except FileNotFoundError:
            raise OffcpuError(f"{perf_data} is missing; {RECORD_AGAIN}") from None
        except OSError as error:
            raise OffcpuError(f"cannot read {perf_data} ({error.strerror}); {RECORD_AGAIN}") from None
        if size == 0:
            raise OffcpuError(f"{perf_data} is empty; {RECORD_AGAIN}")
        return {"size": size, "sha256_of_header": digest.hexdigest()}

    def check(self, directory: Path, info: CaptureInfo) -> None:
        """perf.data's own header must say what capture.json does: the command perf recorded with
        (which names the target) and its events. Another recording's perf.data would be read with
        this one's target, window and threads. (A file that is no perf.data its header can be
        read from is left to the reader to refuse.)"""
        perf_data = self.recorded(directory)
        try:
            data = _core.PerfData(str(perf_data))
            command = data.command_line()
            events = {name for name, _ in data.tracepoint_events()}
        except (_core.PerfDataError, _core.PanicException):
            return  # the reader says what is wrong with it
        if events and SWITCH_TRACEPOINT not in events:
            raise without_switches(perf_data)
        if command is not None and command != info.perf_command:
            raise OffcpuError(f"{perf_data} is another recording than the one {METADATA} beside it describes (perf "
                              f"recorded it with another command); keep each perf.data with its own {METADATA}, or "
                              f"{RECORD_AGAIN}")
        missing = [event["name"] for event in info.events if events and event["name"] not in events]
        if missing:
            raise OffcpuError(f"{METADATA} lists the events {', '.join(missing)}, which perf did not record in "
                              f"{perf_data}; it was edited or damaged: {RECORD_AGAIN}")
        if info.perf_command[-len(info.target.perf_args()):] != info.target.perf_args():
            raise OffcpuError(f"{METADATA} names the target {info.target.describe()}, which is not what perf "
                              f"recorded in {perf_data}; it was edited or damaged: {RECORD_AGAIN}")

    def reader(self, directory: Path, forced: str | None, unsupported: Unsupported) -> ReaderPlan:
        """perf.data read directly, unless it holds what only perf script decodes (a pipe's
        records, another byte order, LBR...) or `forced` names perf script."""
        perf_data = self.recorded(directory)
        if forced == PERF_SCRIPT_READER:
            return ReaderPlan(PERF_SCRIPT_READER, "--reader perf-script", perf_data)
        reason = unsupported(perf_data)
        if reason is None:
            kernel_symbols, vdso = self._kernel_files(directory)
            return ReaderPlan(NATIVE_READER, "--reader native" if forced else "perf.data read directly", perf_data,
                              kernel_symbols, vdso)
        if forced == NATIVE_READER:
            raise OffcpuError(f"--reader native cannot read {perf_data}: {reason}; leave out --reader, and perf "
                              "script reads it")
        return ReaderPlan(PERF_SCRIPT_READER, f"read with perf script: {reason}", perf_data)

    def _kernel_files(self, directory: Path) -> tuple[Path | None, Path | None]:
        kernel_symbols, vdso = (directory / name for name in (KERNEL_SYMBOLS, VDSO_IMAGE))
        return kernel_symbols if kernel_symbols.is_file() else None, vdso if vdso.is_file() else None

    def check_readable(self, perf: str, path: Path, info: CaptureInfo) -> None:
        """Fail early, with the fix, on a perf.data this machine cannot turn into a model."""
        if info.kernel_release != platform.release():
            raise OffcpuError(
                f"this capture was recorded on kernel {info.kernel_release} and this machine runs "
                f"{platform.release()}: perf would name its kernel frames wrongly; report it on the "
                "machine that recorded it (the model it saves there travels with the capture)")
        done = subprocess.run([perf, "report", "--header-only", "-i", str(path)], capture_output=True,
                              encoding="utf-8", errors="replace", env=child_environment())
        if done.returncode != 0:
            reason = (done.stderr.strip().splitlines() or ["unreadable"])[-1]
            raise OffcpuError(f"perf cannot read {path} ({reason}): it is truncated or not a perf.data; "
                              f"{RECORD_AGAIN}")
        # `perf report --header-only`: one line per event
        if SWITCH_TRACEPOINT not in EVENT_NAME.findall(done.stdout):
            raise without_switches(path)


class PlainPerfData(PerfRecording):
    """A perf.data that perf recorded alone (offcpu.reading.plain_perf_data): the file itself is
    the capture, and nothing is saved beside a file offcpu did not make."""

    saves_model = False

    def recorded(self, directory: Path) -> Path:
        return directory

    def check(self, directory: Path, info: CaptureInfo) -> None:
        """Its capture.json is read from its own header: nothing to compare."""

    def _kernel_files(self, directory: Path) -> tuple[Path | None, Path | None]:
        return None, None

    @staticmethod
    def at(path: Path) -> bool:
        """Whether `path` is a perf.data recorded by perf alone: a file that begins as a perf.data
        does, and not the one of a capture directory (which is reported as its capture)."""
        if (path.parent / METADATA).is_file() or not path.is_file():
            # (not opened at all unless a regular file: a FIFO opened, even to be refused, lets its
            # writer write to no one, and the reader that opens it next waits forever)
            return False
        try:
            with open_regular(path) as file:
                return file.read(len(PERF_MAGIC)) in (PERF_MAGIC, PERF_MAGIC_SWAPPED)
        except OSError:  # a directory, nothing there, or no regular file
            return False


class BpfRecording(CaptureKind):
    """The records of offcpu's BPF programs ([its files](docs/capture.md)): every wait timed in the
    kernel, with its stacks under a budget."""

    name, said = "bpf", "BPF"
    timed_in_kernel = reads_runtimes = True
    lost_label = "Lost waits"
    unreadable_units = "records BPF"

    def recorded(self, directory: Path) -> Path:
        return directory / BPF_RECORDS

    def identity(self, directory: Path) -> dict:
        """The size of its records and a hash of their first and last bytes and of its stack
        table, a few MB at most whatever its size."""
        try:
            digest = hashlib.sha256()
            with open_regular(directory / BPF_RECORDS) as file:
                size = os.fstat(file.fileno()).st_size
                digest.update(file.read(HASHED_MAX))
                file.seek(max(size - HASHED_MAX, 0))
                digest.update(file.read(HASHED_MAX))
            with open_regular(directory / BPF_STACKS) as file:
                digest.update(file.read(HASHED_MAX))
        except FileNotFoundError as error:
            raise OffcpuError(f"{error.filename} is missing; {RECORD_AGAIN}") from None
        except OSError as error:
            raise OffcpuError(f"cannot read {error.filename} ({error.strerror}); {RECORD_AGAIN}") from None
        return {"size": size, "sha256_of_ends": digest.hexdigest()}

    def holds_nothing(self, directory: Path, info: CaptureInfo) -> bool:
        """Not one whole record (the reader reads what whole records there are)."""
        try:
            return (directory / BPF_RECORDS).stat().st_size < _core.RECORD_SIZE
        except OSError:
            return False  # the reader says what is wrong with it

    def reader(self, directory: Path, forced: str | None, unsupported: Unsupported) -> ReaderPlan:
        if forced is not None:
            raise OffcpuError(f"--reader {forced} reads a perf.data, and {directory} was recorded with BPF (it has "
                              f"{BPF_RECORDS} instead): leave out --reader")
        return ReaderPlan(BPF_READER, BPF_READER_WHY, directory)

    def recorded_counts(self, info: CaptureInfo) -> str:
        counts = f"{info.samples:,} wait{'s' * (info.samples != 1)}"
        return f"{counts} ({(info.bpf or {}).get('sampled', 0):,} with stacks)"

    def lost_sentence(self, info: CaptureInfo, allowed: str) -> str:
        return (f"the BPF recording lost {info.lost_events:,} waits ({info.lost_share:.1%}{allowed}): its ring "
                "buffer or its table of waits in progress was full, so some waits are missing; record a smaller "
                "target or a shorter --duration" + more_in("events-lost"))

    def unreadable_holder(self, info: CaptureInfo) -> str:
        return "these BPF records hold"

    def recorder_rows(self, info: CaptureInfo) -> list[tuple[str, str]]:
        return [("Recorded with", f"offcpu's BPF programs: {info.backend_why}")]


PERF, BPF, PLAIN = PerfRecording(), BpfRecording(), PlainPerfData()
KINDS: dict[str, CaptureKind] = {kind.name: kind for kind in (PERF, BPF)}  # by capture.json's backend


def kind_of(info: CaptureInfo) -> CaptureKind:
    """What recorded the capture `info` describes (perf, for a backend it does not name, as before
    there were two)."""
    return KINDS.get(info.backend, PERF)


def lost_note(info: CaptureInfo) -> str | None:
    """What the lost events mean and what to do about them; None when none were lost."""
    return kind_of(info).lost_sentence(info, "") if info.lost_events else None


def without_switches(path: Path) -> OffcpuError:
    return OffcpuError(f"{path} was recorded without {SWITCH_TRACEPOINT}, which off-CPU time comes from; "
                       f"{RECORD_AGAIN}, which records it")
