"""The perf.data file format, as `perf record` writes it (perf's
tools/perf/Documentation/perf.data-file-format.txt and include/uapi/linux/perf_event.h).

A file is a header, the event attributes (each with its sample type and the ids
of its events), the data (a stream of records) and feature sections after the
data (build ids, the tracing data with the tracepoints' formats, ...). Records
are in time order per CPU buffer only: perf record writes the buffers in rounds,
each ended by a FINISHED_ROUND record, and perf sorts records by time between
them (see native_decoding.ordered_records).

Everything here reads a memory map of the file; nothing holds its records. The
loops index the file as unsigned 16-bit words (`words`): a record's type is word 0
of its header and its size word 3 (records are 8-byte aligned).
"""

from __future__ import annotations

import ast
import mmap
import operator
import os
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

from offcpu.errors import OffcpuError

MAGIC = b"PERFILE2"
MAGIC_SWAPPED = MAGIC[::-1]
FILE_HEADER = struct.Struct("<8sQQ QQ QQ QQ 4Q")
PIPE_HEADER_SIZE = 16  # pipe mode: only magic and size, the rest comes as records
SECTION = struct.Struct("<QQ")
RECORD_HEADER = struct.Struct("<IHH")
MIN_ATTR_SIZE = 64 + SECTION.size  # perf_event_attr's first version, and the ids section after it
ATTR = struct.Struct("<IIQQQQQ")  # type, size, config, period, sample_type, read_format, flags

# perf_event_attr.type
TYPE_TRACEPOINT = 2

# Record types (header.type): the kernel's, then perf's own (from 64).
MMAP, LOST, COMM, EXIT, THROTTLE, UNTHROTTLE, FORK, READ, SAMPLE, MMAP2 = range(1, 11)
AUX, ITRACE_START, LOST_SAMPLES, SWITCH, SWITCH_CPU_WIDE, NAMESPACES, KSYMBOL, BPF_EVENT = range(11, 19)
CGROUP, TEXT_POKE, AUX_OUTPUT_HW_ID = 19, 20, 21
HEADER_ATTR, HEADER_BUILD_ID, FINISHED_ROUND, COMPRESSED = 64, 67, 68, 81
KERNEL_TYPES = frozenset(range(1, 22))
# perf's own records that say nothing about the scheduler (ids, maps of CPUs and
# threads, time conversion, auxtrace, stat): known, and passed over.
PERF_TYPES = frozenset(range(64, 83)) - {COMPRESSED}
# Kernel records that carry no event offcpu uses (perf script shows none of them with its fields).
QUIET_TYPES = frozenset({THROTTLE, UNTHROTTLE, READ, AUX, ITRACE_START, NAMESPACES, KSYMBOL, BPF_EVENT, CGROUP,
                         TEXT_POKE, AUX_OUTPUT_HW_ID})

# header.misc
MISC_CPUMODE_MASK = 0x7
MISC_KERNEL = 1
MISC_SWITCH_OUT = 1 << 13
MISC_SWITCH_OUT_PREEMPT = 1 << 14
MISC_COMM_EXEC = 1 << 13
MISC_MMAP_BUILD_ID = 1 << 14
MISC_BUILD_ID_SIZE = 1 << 15

# perf_event_attr.sample_type bits, in the order their fields come in a sample
SAMPLE_IDENTIFIER = 1 << 16
SAMPLE_IP = 1 << 0
SAMPLE_TID = 1 << 1
SAMPLE_TIME = 1 << 2
SAMPLE_ADDR = 1 << 3
SAMPLE_READ = 1 << 4
SAMPLE_CALLCHAIN = 1 << 5
SAMPLE_ID = 1 << 6
SAMPLE_CPU = 1 << 7
SAMPLE_PERIOD = 1 << 8
SAMPLE_STREAM_ID = 1 << 9
SAMPLE_RAW = 1 << 10
SAMPLE_BRANCH_STACK = 1 << 11
SAMPLE_REGS_USER = 1 << 12
SAMPLE_STACK_USER = 1 << 13

# perf_event_attr flag bits
ATTR_SAMPLE_ID_ALL = 1 << 18

# Feature sections (bits of the header's feature bitmap)
FEATURE_TRACING_DATA = 1
FEATURE_BUILD_ID = 2
FEATURE_COMPRESSED = 27

# Call chain markers: entries at or above CONTEXT_MAX say whose addresses follow (the kernel's, the user's...).
CONTEXT_KERNEL = 0xFFFF_FFFF_FFFF_FF80
CONTEXT_USER = 0xFFFF_FFFF_FFFF_FE00
CONTEXT_MAX = 0xFFFF_FFFF_FFFF_F001
# All the markers there are (hypervisor, kernel, user, and a guest's): perf drops a chain
# holding any other entry at or above CONTEXT_MAX as invalid, and prints its sample without one.
CONTEXTS = frozenset({0xFFFF_FFFF_FFFF_FFE0, CONTEXT_KERNEL, CONTEXT_USER, 0xFFFF_FFFF_FFFF_F800,
                      0xFFFF_FFFF_FFFF_F780, 0xFFFF_FFFF_FFFF_F600})

TRACING_MAGIC = b"\x17\x08\x44tracing"


def damaged(path: Path, what: str) -> OffcpuError:
    return OffcpuError(f"{path} is not a readable perf.data ({what}); record it again with 'offcpu record'")


@dataclass(frozen=True)
class Field:
    """A tracepoint field as its format gives it."""

    offset: int
    size: int
    signed: bool


@dataclass(frozen=True)
class Tracepoint:
    """One tracepoint's format, from the tracing data perf stored at record time."""

    system: str
    name: str
    id: int
    fields: dict[str, Field]
    print_fmt: str

    @property
    def full_name(self) -> str:
        return f"{self.system}:{self.name}"


@dataclass(frozen=True)
class SampleLayout:
    """Where a sample's fields are, in bytes from the start of its record (None: absent)."""

    tid: int | None
    time: int | None
    cpu: int | None
    callchain: int | None  # the chain's length; its addresses follow
    raw: int | None  # when there is no call chain; else right after the chain

    @classmethod
    def of(cls, sample_type: int) -> SampleLayout:
        offset = 8
        where: dict[int, int] = {}
        for bit, size in ((SAMPLE_IDENTIFIER, 8), (SAMPLE_IP, 8), (SAMPLE_TID, 8), (SAMPLE_TIME, 8),
                          (SAMPLE_ADDR, 8), (SAMPLE_ID, 8), (SAMPLE_STREAM_ID, 8), (SAMPLE_CPU, 8),
                          (SAMPLE_PERIOD, 8), (SAMPLE_CALLCHAIN, 0), (SAMPLE_RAW, 0)):
            if sample_type & bit:
                where[bit] = offset
                offset += size
        return cls(where.get(SAMPLE_TID), where.get(SAMPLE_TIME), where.get(SAMPLE_CPU), where.get(SAMPLE_CALLCHAIN),
                   where.get(SAMPLE_RAW))


@dataclass(frozen=True)
class IdLayout:
    """Where pid/tid and time are in the sample_id trailer of non-sample records,
    in bytes back from the record's end (attr.sample_id_all)."""

    tid_from_end: int | None
    time_from_end: int | None
    cpu_from_end: int | None
    size: int  # of the whole trailer

    @classmethod
    def of(cls, sample_type: int) -> IdLayout:
        sizes = [(bit, 8) for bit in (SAMPLE_TID, SAMPLE_TIME, SAMPLE_ID, SAMPLE_STREAM_ID, SAMPLE_CPU,
                                      SAMPLE_IDENTIFIER) if sample_type & bit]
        total = sum(size for _, size in sizes)
        where, offset = {}, 0
        for bit, size in sizes:
            where[bit] = total - offset
            offset += size
        return cls(where.get(SAMPLE_TID), where.get(SAMPLE_TIME), where.get(SAMPLE_CPU), total)


@dataclass(frozen=True)
class Attr:
    """One event as perf_event_attr describes it, with the ids its records carry."""

    type: int
    config: int
    sample_type: int
    flags: int
    ids: tuple[int, ...]

    @property
    def sample_id_all(self) -> bool:
        return bool(self.flags & ATTR_SAMPLE_ID_ALL)


@dataclass(frozen=True)
class BuildId:
    """A file perf saw samples in, as the BUILD_ID feature section lists it."""

    pid: int
    build_id: bytes
    filename: str
    kernel: bool


@dataclass
class PerfData:
    """The parts of a perf.data that are not records, and a memory map of the file."""

    path: Path
    map: mmap.mmap
    data_start: int
    data_end: int
    attrs: list[Attr]
    features: dict[int, tuple[int, int]]  # feature bit -> (offset, size)
    pipe: bool = False
    tracepoints: dict[int, Tracepoint] = field(default_factory=dict)  # by id (attr.config)

    @property
    def words(self) -> memoryview:
        """The file as little-endian u16 words, for the hot loops: record type and size
        at word offset//2 and offset//2 + 3."""
        return memoryview(self.map)[:self.data_end - self.data_end % 2].cast("H")

    def build_ids(self) -> list[BuildId]:
        section = self.features.get(FEATURE_BUILD_ID)
        return _build_ids(self.map, *section) if section else []


def open_perf_data(path: Path) -> PerfData:
    """Map `path` and read its header, attributes and feature sections; an OffcpuError
    when it is not a perf.data this reader can map (see also unsupported_format)."""
    try:
        with open(path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            if size == 0:
                raise damaged(path, "it is empty")
            mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as error:
        raise OffcpuError(f"cannot read {path}: {error.strerror}") from None
    if size < PIPE_HEADER_SIZE or mapped[:8] not in (MAGIC, MAGIC_SWAPPED):
        raise damaged(path, "no perf.data header: another tool's file, or not perf's at all")
    if mapped[:8] == MAGIC_SWAPPED:
        return PerfData(path, mapped, 0, 0, [], {}, pipe=False, tracepoints={-1: _SWAPPED})
    header_size = struct.unpack_from("<Q", mapped, 8)[0]
    if header_size == PIPE_HEADER_SIZE:
        return PerfData(path, mapped, PIPE_HEADER_SIZE, size, [], {}, pipe=True)
    if size < FILE_HEADER.size:
        raise damaged(path, "cut short inside its header")
    (_, _, attr_size, attrs_offset, attrs_size, data_offset, data_size, _, _,
     *feature_words) = FILE_HEADER.unpack_from(mapped, 0)
    if data_size == 0 or data_offset + data_size > size or data_offset % 8:
        raise damaged(path, f"its data section ends at byte {data_offset + data_size}, the file at {size}: "
                            "cut short, or perf did not finish writing it")
    attrs = _attrs(path, mapped, attr_size, attrs_offset, attrs_size, size)
    features = _feature_sections(path, mapped, data_offset + data_size, feature_words, size)
    data = PerfData(path, mapped, data_offset, data_offset + data_size, attrs, features)
    tracing = features.get(FEATURE_TRACING_DATA)
    if tracing:
        data.tracepoints = _tracepoints(mapped, *tracing)
    return data


# A placeholder that marks a file of the other byte order (see unsupported_format).
_SWAPPED = Tracepoint("", "", -1, {}, "")


def is_swapped(data: PerfData) -> bool:
    return data.tracepoints.get(-1) is _SWAPPED


def _attrs(path: Path, mapped: mmap.mmap, attr_size: int, offset: int, size: int, file_size: int) -> list[Attr]:
    if attr_size < MIN_ATTR_SIZE or attr_size > 4096 or size % attr_size or offset + size > file_size or not size:
        raise damaged(path, "its event attributes are not where its header says")
    attrs = []
    for entry in range(offset, offset + size, attr_size):
        kind, _, config, _, sample_type, _, flags = ATTR.unpack_from(mapped, entry)
        ids_offset, ids_size = SECTION.unpack_from(mapped, entry + attr_size - SECTION.size)
        if ids_offset + ids_size > file_size or ids_size % 8:
            raise damaged(path, "the ids of its events are not where its header says")
        ids = struct.unpack_from(f"<{ids_size // 8}Q", mapped, ids_offset)
        attrs.append(Attr(kind, config, sample_type, flags, ids))
    return attrs


def _feature_sections(path: Path, mapped: mmap.mmap, offset: int, words: list[int],
                      file_size: int) -> dict[int, tuple[int, int]]:
    """The feature sections, one (offset, size) after the data for each bit set."""
    bits = [bit for bit in range(256) if words[bit // 64] >> (bit % 64) & 1]
    sections = {}
    for index, bit in enumerate(bits):
        at = offset + index * SECTION.size
        if at + SECTION.size > file_size:
            raise damaged(path, "cut short after its data")
        start, size = SECTION.unpack_from(mapped, at)
        if start + size > file_size:
            raise damaged(path, "cut short after its data")
        sections[bit] = (start, size)
    return sections


def _build_ids(mapped: mmap.mmap, offset: int, size: int) -> list[BuildId]:
    """The BUILD_ID section: build_id_event records (header, pid, 24 bytes of build id,
    of which misc says how many are used, then the file's name)."""
    found = []
    at, end = offset, offset + size
    while at + 36 <= end:
        _, misc, length = RECORD_HEADER.unpack_from(mapped, at)
        if length < 36 or at + length > end:
            break
        pid = struct.unpack_from("<i", mapped, at + 8)[0]
        raw = mapped[at + 12:at + 36]
        used = raw[20] if misc & MISC_BUILD_ID_SIZE and raw[20] <= 20 else 20
        name = mapped[at + 36:at + length].split(b"\0", 1)[0].decode(errors="replace")
        found.append(BuildId(pid, raw[:used], name, misc & MISC_CPUMODE_MASK == MISC_KERNEL))
        at += length
    return found


class _Cursor:
    """Reads the tracing data section front to back."""

    def __init__(self, mapped: mmap.mmap, offset: int, size: int) -> None:
        self.data = mapped[offset:offset + size]
        self.at = 0

    def string(self) -> bytes:
        end = self.data.index(b"\0", self.at)
        text, self.at = self.data[self.at:end], end + 1
        return text

    def number(self, size: int) -> int:
        if self.at + size > len(self.data):
            raise ValueError("cut short")
        value = int.from_bytes(self.data[self.at:self.at + size], "little")
        self.at += size
        return value

    def block(self, size_bytes: int) -> bytes:
        length = self.number(size_bytes)
        if self.at + length > len(self.data):
            raise ValueError("cut short")
        text, self.at = self.data[self.at:self.at + length], self.at + length
        return text


def _tracepoints(mapped: mmap.mmap, offset: int, size: int) -> dict[int, Tracepoint]:
    """The tracepoints' formats perf saved at record time: after a magic, version,
    endianness, long size and page size come the ring buffer's header_page and
    header_event, the ftrace formats, then each system's event formats (the text of
    tracefs' events/SYSTEM/NAME/format), with 8-byte sizes. {} when unreadable."""
    cursor = _Cursor(mapped, offset, size)
    try:
        if cursor.data[:10] != TRACING_MAGIC:
            return {}
        cursor.at = 10
        cursor.string()  # version
        if cursor.number(1) != 0:  # big endian
            return {}
        cursor.number(1)  # sizeof(long)
        cursor.number(4)  # page size
        for expected in (b"header_page", b"header_event"):
            if cursor.string() != expected:
                return {}
            cursor.block(8)
        for _ in range(cursor.number(4)):
            cursor.block(8)  # ftrace's own events
        found = {}
        for _ in range(cursor.number(4)):
            system = cursor.string().decode(errors="replace")
            for _ in range(cursor.number(4)):
                tracepoint = parse_format(system, cursor.block(8).decode(errors="replace"))
                if tracepoint is not None:
                    found[tracepoint.id] = tracepoint
        return found
    except ValueError:
        return {}


FORMAT_FIELD = re.compile(r"field:(?P<declaration>[^;]*);\s*offset:(?P<offset>\d+);\s*size:(?P<size>\d+);"
                          r"\s*signed:(?P<signed>\d+);")


def parse_format(system: str, text: str) -> Tracepoint | None:
    """A tracefs format text ("name: ...", "ID: ...", "format:" and its fields, "print fmt: ...")."""
    name = re.search(r"^name: (\S+)$", text, re.MULTILINE)
    event_id = re.search(r"^ID: (\d+)$", text, re.MULTILINE)
    print_fmt = re.search(r"^print fmt: (.*)$", text, re.MULTILINE)
    if not name or not event_id:
        return None
    fields = {}
    for match in FORMAT_FIELD.finditer(text):
        declared = match["declaration"].split()[-1]
        fields[declared.split("[", 1)[0]] = Field(int(match["offset"]), int(match["size"]), match["signed"] == "1")
    return Tracepoint(system, name[1], int(event_id[1]), fields, print_fmt[1] if print_fmt else "")


@dataclass(frozen=True)
class StateNames:
    """How perf prints sched_switch's prev_state, read from the tracepoint's print
    format: the bits under `mask` as __print_flags names joined by `delimiter`
    (`zero` when none is set), then '+' when `plus` is set (which offcpu drops)."""

    mask: int
    flags: tuple[tuple[int, str], ...]
    delimiter: str
    zero: str

    def name(self, state: int) -> str:
        value = state & self.mask
        if not value:
            return self.zero
        names = []
        for bit, name in self.flags:
            if bit and value & bit == bit:
                names.append(name)
                value &= ~bit
        if value:
            names.append(f"0x{value:x}")
        return self.delimiter.join(names)


PREV_STATE = re.compile(
    r"\(REC->prev_state & (?P<mask>.+?)\) \? __print_flags\(REC->prev_state & (?P=mask), \"(?P<delimiter>[^\"]*)\", "
    r"(?P<flags>(?:\{ *[0-9a-fx]+, *\"[^\"]*\" *\},? *)+)\) : \"(?P<zero>[^\"]*)\"")
FLAG = re.compile(r"\{ *([0-9a-fx]+), *\"([^\"]*)\" *\}")


def state_names(print_fmt: str) -> StateNames | None:
    """sched_switch's prev_state printing, when its print format has the shape of
    kernels since 4.14 (a masked __print_flags, else a name for no bit set)."""
    match = PREV_STATE.search(print_fmt)
    if match is None:
        return None
    try:
        mask = constant(match["mask"])
        flags = tuple((int(value, 0), name) for value, name in FLAG.findall(match["flags"]))
    except ValueError:
        return None
    return StateNames(mask, flags, match["delimiter"], match["zero"])


_OPERATORS: dict[type, Callable[[int, int], int]] = {
    ast.BitOr: operator.or_, ast.BitAnd: operator.and_, ast.Add: operator.add, ast.Sub: operator.sub,
    ast.LShift: operator.lshift, ast.RShift: operator.rshift,
}


def constant(expression: str) -> int:
    """The value of a C integer constant expression of a print format (hex and decimal
    numbers, | & + - << >> and parentheses); ValueError for anything else."""
    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.left), value(node.right))
        raise ValueError(f"not a constant: {expression}")
    try:
        return value(ast.parse(expression.strip(), mode="eval").body)
    except SyntaxError:
        raise ValueError(f"not a constant: {expression}") from None


# Ordering -------------------------------------------------------------------

@dataclass
class Index:
    """What a walk over every record header finds: where each round begins, and the
    records that describe tasks (their names, births, deaths and memory maps), which
    every part of the file needs whichever part they are in."""

    round_starts: list[int]  # offsets of the first record of each round
    task_records: list[int]  # offsets of COMM, FORK, EXIT, MMAP and MMAP2 records, in file order
    unknown: int  # records of types this reader does not know, skipped
    compressed: bool  # COMPRESSED records (perf record -z)


TASK_TYPES = frozenset({COMM, FORK, EXIT, MMAP, MMAP2})
# The smallest record of each task type that holds its fields (header, ids, then names or times).
MIN_TASK_SIZE = {COMM: 24, FORK: 32, EXIT: 32, MMAP: 48, MMAP2: 80}


def index_records(data: PerfData) -> Index:
    """One pass over the record headers (the cost of a pass is the number of records;
    this loop is the reader's floor, so it does nothing else, and reads locals only)."""
    words = data.words
    position, end = data.data_start, data.data_end
    rounds, tasks = [position], []
    unknown = 0
    compressed = False
    last_word = len(words) - 3
    sample, switch_cpu_wide, switch = SAMPLE, SWITCH_CPU_WIDE, SWITCH
    while position < end:
        release(data, data.data_start, position)
        part_end = min(end, position + RELEASE_EVERY)
        while position < part_end:
            word = position >> 1
            if word >= last_word:
                raise damaged(data.path, f"a record at byte {position} is cut short")
            kind, size = words[word], words[word + 3]
            if kind == sample or kind == switch_cpu_wide or kind == switch:
                if size < 8:
                    raise damaged(data.path, f"the record at byte {position} has size {size}")
                position += size
                continue
            if size < 8 or size % 8 or words[word + 1]:
                raise damaged(data.path, f"the record at byte {position} has size {size} and type "
                                         f"{kind + (words[word + 1] << 16)}")
            if kind == FINISHED_ROUND:
                rounds.append(position + size)
            elif kind in TASK_TYPES:
                if size >= MIN_TASK_SIZE[kind]:
                    tasks.append(position)
                else:
                    unknown += 1
            elif kind == LOST or kind == LOST_SAMPLES:  # counted by perf report --stats (describe)
                unknown += size < 24
            elif kind == COMPRESSED:
                compressed = True
            elif kind not in QUIET_TYPES and kind not in PERF_TYPES:
                unknown += 1
            position += size
    if position != end:
        raise damaged(data.path, f"its last record runs past the end of its data section (byte {end})")
    release(data, data.data_start, end)
    return Index(rounds, tasks, unknown, compressed)


RELEASE_EVERY = 8 << 20  # bytes read before the pages behind them are let go


def release(data: PerfData, start: int, end: int) -> None:
    """Let the pages of bytes start..end of the file go from this process's memory: they
    stay in the page cache (and come back if read again), and a reader of a file of
    gigabytes stays as small as its own data. Cheap for pages already gone: a reader
    releases all it has read so far, pages read again included."""
    first, last = start // mmap.PAGESIZE * mmap.PAGESIZE, end // mmap.PAGESIZE * mmap.PAGESIZE
    if last > first:
        data.map.madvise(mmap.MADV_DONTNEED, first, last - first)


@dataclass(frozen=True)
class Clock:
    """How to read a record's time: at a fixed offset in a sample (all attrs agree),
    or back from the end of any other record, by its event's sample_id layout (found
    by the PERF_SAMPLE_IDENTIFIER that ends it, unless all events lay it out alike)."""

    sample_time: int
    trailers: dict[int, IdLayout]  # by event id
    uniform: IdLayout | None  # when every event's trailer is laid out alike
    uniform_size: int  # with a uniform trailer, how long a record must be to hold one

    @classmethod
    def of(cls, data: PerfData) -> Clock:
        sample_time = SampleLayout.of(data.attrs[0].sample_type).time
        trailers = {event_id: IdLayout.of(attr.sample_type) for attr in data.attrs for event_id in attr.ids}
        trailers[0] = IdLayout.of(data.attrs[0].sample_type)  # perf's synthesized records: id 0, the first event
        layouts = {IdLayout.of(attr.sample_type) for attr in data.attrs}
        uniform = next(iter(layouts)) if len(layouts) == 1 else None
        return cls(sample_time or 0, trailers, uniform, uniform.size + 8 if uniform else 0)

    def trailer(self, mapped: mmap.mmap, end: int) -> IdLayout | None:
        """The sample_id layout of the record that ends at `end`."""
        if self.uniform is not None:
            return self.uniform
        return self.trailers.get(int.from_bytes(mapped[end - 8:end], "little"))

    def time_of(self, words: memoryview, mapped: mmap.mmap, position: int) -> int:
        kind = words[position >> 1]
        if kind == SAMPLE:
            return int.from_bytes(mapped[position + self.sample_time:position + self.sample_time + 8], "little")
        if kind in KERNEL_TYPES:
            end = position + words[(position >> 1) + 3]
            if end - position < 16:
                return -1
            layout = self.trailer(mapped, end)
            if layout is None or layout.time_from_end is None or end - position < layout.size + 8:
                return -1
            return int.from_bytes(mapped[end - layout.time_from_end:end - layout.time_from_end + 8], "little")
        return -1  # perf's own records carry no time


def balanced_slices(data: PerfData, rounds: list[int], start_ns: int, end_ns: int,
                    count: int) -> list[tuple[int, int]]:
    """`count` consecutive slices of start_ns..end_ns (both included) of about the same
    number of records: cut at the first time of the rounds nearest equal parts of the file
    (events come unevenly in time), so that workers share the reading evenly; the same
    cuts whichever reader reads them."""
    clock = Clock.of(data)
    bounds = [start_ns]
    for part in range(1, count):
        target = data.data_start + (data.data_end - data.data_start) * part // count
        number = min(range(len(rounds)), key=lambda index: abs(rounds[index] - target))
        cut = first_time(data, data.words, clock, rounds, number)
        if bounds[-1] < cut < end_ns:
            bounds.append(cut)
    bounds.append(end_ns + 1)
    return [(first, after - 1) for first, after in pairwise(bounds)]


def round_for_time(data: PerfData, clock: Clock, rounds: list[int], time_ns: int) -> int:
    """The first round that may hold a record at or after `time_ns`: perf record writes
    a round's records after every record two rounds before, so a record of time t is
    never earlier than two rounds before the first round that starts after t."""
    words = data.words
    low, high = 0, len(rounds)
    while low < high:  # the first round whose first timed record is at or after time_ns
        middle = (low + high) // 2
        if first_time(data, words, clock, rounds, middle) < time_ns:
            low = middle + 1
        else:
            high = middle
    return max(0, low - 2)


def first_time(data: PerfData, words: memoryview, clock: Clock, rounds: list[int], number: int) -> int:
    end = rounds[number + 1] if number + 1 < len(rounds) else data.data_end
    position = rounds[number]
    while position < end:
        time = clock.time_of(words, data.map, position)
        if time >= 0:
            return time
        position += words[(position >> 1) + 3]
    return -1
