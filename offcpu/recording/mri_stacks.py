"""MRI Ruby's threads and their Ruby frames, read from a live process's memory (Ruby 3.1).

No reader of Ruby stacks reads a waiting thread's: rbspy reads only the execution context that
holds the GVL (`ruby_current_execution_context_ptr`, in 3.x the main ractor's `running_ec`),
and a thread waiting for a Mutex, a Queue or the GVL itself does not hold it. So offcpu walks
MRI's own structures, read through /proc/PID/mem (what process_vm_readv reads, with the same
ptrace check), the process never stopped: from `ruby_current_vm_ptr` (a symbol libruby exports)
to the main ractor, its list of threads, and each thread's execution context, whose control
frames hold the iseq (label, path) and the pc its line is found from, as MRI's own backtraces
find it (the iseq's instruction table, through its succinct index). The offsets below are those
of MRI 3.1 on x86-64 (vm_core.h, ractor_core.h, iseq.c, checked against Debian's 3.1.2): another
version is found and said, never read.

What a thread waits for is in the VM's structures too: in the GVL's queue of waiters (`waitq`),
the GVL, held by its `owner`; `locking_mutex`, a Mutex it waits to lock, held by the thread whose
`keeping_mutexes` list has it; in another thread's `join_list`, Thread#join; its status
THREAD_STOPPED_FOREVER otherwise, asleep until another thread wakes it: Queue#pop,
ConditionVariable#wait, sleep.

Everything read is the target's, written while it runs: every pointer is read with a bound
(frames, threads, string lengths), a read that fails (the memory moved or was freed) drops that
thread, and a structure that makes no sense ends the read (MriError).
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass, replace

from offcpu._core import elf_symbol_address
from offcpu.runtime_frames import ASLEEP_UNTIL_WOKEN, WAITS_FOR_GVL, WAITS_FOR_JOIN

SUPPORTED = "3.1"
VM_SYMBOL = "ruby_current_vm_ptr"
_LIBRUBY = re.compile(r"/libruby-(\d+\.\d+)\.so")
_RUBY_EXE = re.compile(r"^ruby(\d+\.\d+)?$")

MAX_THREADS = 1024
MAX_FRAMES = 512
MAX_STRING = 4096
MAX_HELD = 64  # mutexes one thread is read to hold
# MRI 3.1, x86-64
VM_MAIN_RACTOR = 32  # rb_vm_t.ractor.main_ractor
RACTOR_THREADS = 304  # rb_ractor_t.threads.set (a list_head whose nodes are threads' lt_node, at their offset 0)
RACTOR_GVL_OWNER, RACTOR_GVL_WAITQ = 336, 384  # rb_ractor_t.threads.gvl: owner, waitq (a list_head)
THREAD_GVL_NODE = 104  # rb_thread_t.native_thread_data.node.gvl: its node in the GVL's waitq
THREAD_EC, THREAD_TID, THREAD_STATUS = 40, 88, 92  # rb_thread_t: ec, tid (gettid), status (2 bits)
THREAD_LOCKING_MUTEX, THREAD_KEEPING_MUTEXES, THREAD_JOIN_LIST, THREAD_NAME = 264, 272, 280, 352
WAITING_NEXT, WAITING_THREAD = 0, 8  # rb_waiting_list: next, thread
EC_VM_STACK, EC_VM_STACK_SIZE, EC_CFP = 0, 8, 16  # rb_execution_context_t
CFP_SIZE = 64  # rb_control_frame_t: pc, sp, iseq, self, ep, ... (its first five words are read)
ISEQ_BODY = 16
BODY_ENCODED, BODY_PATHOBJ, BODY_LABEL = 8, 64, 80  # rb_iseq_constant_body: iseq_encoded, location
BODY_INSNS, BODY_INSNS_SIZE, BODY_SUCC_INDEX = 120, 136, 144  # insns_info: body, size, succ_index_table
INSN_INFO_SIZE = 12  # iseq_insn_info_entry: line_no, node_id, events
TYPED_DATA = 32  # RTypedData.data
MUTEX_NEXT = 8  # rb_mutex_t.next_mutex
FRAME_MAGIC_MASK, FRAME_MAGIC_CFUNC = 0x7FFF0001, 0x55550001  # ep[0]'s frame type
T_MASK, T_STRING, T_ARRAY = 0x1F, 0x05, 0x07
NOEMBED = 1 << 13  # RSTRING_NOEMBED, RARRAY_EMBED_FLAG's bit (FL_USER1)
EMBED_LEN_SHIFT, EMBED_LEN_MASK = 14, 0x1F  # an embedded string's length, in its flags
IMMEDIATE = 54  # succ_index_table: entries of the immediate part (9 of 7 bits a word)
THREAD_STOPPED_FOREVER = 2


class MriError(Exception):
    """A Ruby process that cannot be read (one line)."""


@dataclass(frozen=True)
class RubyFrame:
    function: str
    file: str
    line: int


@dataclass(frozen=True)
class RubyThread:
    tid: int
    name: str | None
    frames: tuple[RubyFrame, ...]  # innermost first; frames of C methods left out
    mutex: int  # the Mutex it waits to lock (its rb_mutex_t), 0: none
    held: tuple[int, ...]  # the Mutexes it holds
    waits: str | None  # WAITS_FOR_GVL, WAITS_FOR_JOIN, ASLEEP_UNTIL_WOKEN, or None
    address: int  # its rb_thread_t


def ruby_version(pid: int) -> tuple[str, str] | None:
    """(the MRI version a process runs, the file its VM symbol is in) from its maps: a libruby it
    maps (`libruby-3.1.so`), or its executable named ruby (a static build: its version unknown,
    ''); None when it runs no Ruby (or is gone)."""
    try:
        with open(f"/proc/{pid}/maps", errors="replace") as maps:
            for line in maps:
                found = _LIBRUBY.search(line)
                if found:
                    return found.group(1), line.split(maxsplit=5)[5].strip()
        exe = os.readlink(f"/proc/{pid}/exe").removesuffix(" (deleted)")
    except (OSError, IndexError):
        return None
    match = _RUBY_EXE.match(os.path.basename(exe))
    return (match.group(1) or "", exe) if match else None


class MriReader:
    """Reads one MRI 3.1 process's threads. MriError when its VM cannot be found."""

    def __init__(self, pid: int, path: str) -> None:
        self.pid = pid
        found = elf_symbol_address(f"/proc/{pid}/root{path}", VM_SYMBOL)
        if found is None:
            raise MriError(f"{path} has no symbol {VM_SYMBOL}")
        symbol, offset, address = found
        base = self._load_base(path, offset, address)
        if base is None:
            raise MriError(f"{path} is not mapped where its segments say")
        self.vm_pointer = base + symbol
        # in a pid namespace of its own, its threads' tids (gettid's) are not the recording's
        with open(f"/proc/{pid}/status", errors="replace") as status:
            nspid = next((line.split()[-1] for line in status if line.startswith("NSpid:")), str(pid))
        self.namespaced = nspid != str(pid)

    def _load_base(self, path: str, first_offset: int, first_address: int) -> int | None:
        """Where the file's addresses start in the process: its mapping of the first segment."""
        with open(f"/proc/{self.pid}/maps", errors="replace") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and fields[5].strip() == path:
                    start, end = (int(value, 16) for value in fields[0].split("-"))
                    offset = int(fields[2], 16)
                    if offset <= first_offset < offset + end - start:
                        return start + first_offset - offset - first_address
        return None

    def read(self) -> tuple[list[RubyThread], int]:
        """Each thread of the main ractor, with its Ruby frames, and the one holding the GVL (its
        address, 0: none). MriError: the VM's structures could not be read (the process is gone,
        or they make no sense)."""
        try:
            fd = os.open(f"/proc/{self.pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
        except OSError as error:
            raise MriError(f"its memory cannot be read ({error.strerror})") from None
        try:
            return _Walk(fd).threads(self.vm_pointer)
        except (OSError, struct.error, ValueError):
            raise MriError("its VM's thread list could not be read") from None
        finally:
            os.close(fd)


@dataclass(frozen=True)
class _Iseq:
    label: str
    path: str
    encoded: int  # its instructions' address
    table: int  # its instruction table (iseq_insn_info_entry), size entries
    size: int
    succ_index: int  # the table's succinct index


class _Walk:
    """One read of a process's threads, through its memory's file."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._iseqs: dict[int, _Iseq] = {}
        self._frames: dict[tuple[int, int], RubyFrame] = {}

    def bytes(self, address: int, size: int) -> bytes:
        if address <= 0:
            raise ValueError("a null pointer")
        data = os.pread(self.fd, size, address)
        if len(data) != size:
            raise ValueError("a short read")
        return data

    def word(self, address: int) -> int:
        return int.from_bytes(self.bytes(address, 8), "little")

    def u32(self, address: int) -> int:
        return int.from_bytes(self.bytes(address, 4), "little")

    def string(self, value: int) -> str:
        """A Ruby String's text."""
        flags = self.word(value)
        if flags & T_MASK != T_STRING:
            raise ValueError("not a String")
        if flags & NOEMBED:
            length, pointer = self.word(value + 16), self.word(value + 24)
            data = self.bytes(pointer, min(length, MAX_STRING)) if length else b""
        else:
            data = self.bytes(value + 16, (flags >> EMBED_LEN_SHIFT) & EMBED_LEN_MASK)
        return data.decode(errors="replace")

    def path(self, value: int) -> str:
        """An iseq's pathobj: a String, or an Array [path, realpath]."""
        flags = self.word(value)
        if flags & T_MASK == T_ARRAY:
            items = value + 16 if flags & NOEMBED else self.word(value + 32)  # embedded, else its heap pointer
            return self.string(self.word(items))
        return self.string(value)

    def threads(self, vm_pointer: int) -> tuple[list[RubyThread], int]:
        """The main ractor's threads, and the one that holds the GVL (its rb_thread_t, 0: none)."""
        ractor = self.word(self.word(vm_pointer) + VM_MAIN_RACTOR)
        waiting_gvl = set(self.listed(ractor + RACTOR_GVL_WAITQ, THREAD_GVL_NODE))
        found: dict[int, RubyThread] = {}  # by its rb_thread_t
        joining: set[int] = set()  # the threads in some thread's join_list
        for node in self.listed(ractor + RACTOR_THREADS, 0):
            try:
                found[node] = self.thread(node)
                joining.update(self.joiners(node))
            except (OSError, ValueError):
                pass  # a thread ending while it was read

        def waits(address: int, thread: RubyThread) -> str | None:
            if address in waiting_gvl:
                return WAITS_FOR_GVL  # (after a Mutex's wait too: it takes the GVL back)
            if address in joining and thread.waits == ASLEEP_UNTIL_WOKEN:
                return WAITS_FOR_JOIN
            return thread.waits

        return ([replace(thread, waits=waits(address, thread)) for address, thread in found.items()],
                self.word(ractor + RACTOR_GVL_OWNER))

    def listed(self, head: int, node_offset: int) -> list[int]:
        """The structures on a list_head (ccan's list), each at its node less `node_offset`."""
        found: list[int] = []
        node = self.word(head)
        while node != head:
            if len(found) == MAX_THREADS:
                raise ValueError("a list longer than a ractor's threads")
            found.append(node - node_offset)
            node = self.word(node)
        return found

    def joiners(self, thread: int) -> list[int]:
        """The threads waiting in Thread#join for this one to end (its join_list: rb_waiting_list
        entries on their own stacks)."""
        joiners: list[int] = []
        at = self.word(thread + THREAD_JOIN_LIST)
        while at and len(joiners) < MAX_THREADS:
            joiners.append(self.word(at + WAITING_THREAD))
            at = self.word(at + WAITING_NEXT)
        return joiners

    def thread(self, thread: int) -> RubyThread:
        ec = self.word(thread + THREAD_EC)
        tid = int.from_bytes(self.bytes(thread + THREAD_TID, 4), "little", signed=True)
        status = self.bytes(thread + THREAD_STATUS, 1)[0] & 3
        locking = self.word(thread + THREAD_LOCKING_MUTEX)  # a Mutex's VALUE, 0 (Qfalse): none
        mutex = self.word(locking + TYPED_DATA) if locking else 0
        held: list[int] = []
        at = self.word(thread + THREAD_KEEPING_MUTEXES)
        while at and len(held) < MAX_HELD:
            held.append(at)
            at = self.word(at + MUTEX_NEXT)
        name_value = self.word(thread + THREAD_NAME)
        try:
            name = self.string(name_value) if name_value > 0xFF else None  # nil is 8, false 0
        except (OSError, ValueError):
            name = None
        asleep = mutex == 0 and status == THREAD_STOPPED_FOREVER
        return RubyThread(tid, name, self.frames(ec), mutex, tuple(held), ASLEEP_UNTIL_WOKEN if asleep else None,
                          thread)

    def frames(self, ec: int) -> tuple[RubyFrame, ...]:
        stack, size, cfp = (self.word(ec + offset) for offset in (EC_VM_STACK, EC_VM_STACK_SIZE, EC_CFP))
        end = stack + size * 8 - CFP_SIZE  # the stack's first frame, a dummy one at its top
        count = (end - cfp) // CFP_SIZE
        if not 0 <= count <= MAX_FRAMES * 4:
            raise ValueError("control frames out of their stack")
        raw = self.bytes(cfp, count * CFP_SIZE) if count else b""
        frames = []
        for index in range(count):
            pc, _, iseq, _, ep = struct.unpack_from("<5Q", raw, index * CFP_SIZE)
            if not pc or not iseq or not ep or self.word(ep) & FRAME_MAGIC_MASK == FRAME_MAGIC_CFUNC:
                continue  # a C method's frame (its name is in a symbol table libruby does not export)
            frame = self._frames.get((iseq, pc))
            if frame is None:
                code = self.iseq(iseq)
                frame = self._frames[(iseq, pc)] = RubyFrame(code.label, code.path, self.line(code, pc))
            frames.append(frame)
            if len(frames) == MAX_FRAMES:
                break
        return tuple(frames)

    def iseq(self, iseq: int) -> _Iseq:
        """An iseq's label, path and line table, read once a read (threads share their methods)."""
        found = self._iseqs.get(iseq)
        if found is None:
            raw = self.bytes(self.word(iseq + ISEQ_BODY), BODY_SUCC_INDEX + 8)

            def word(offset: int) -> int:
                return int.from_bytes(raw[offset:offset + 8], "little")

            found = self._iseqs[iseq] = _Iseq(self.string(word(BODY_LABEL)), self.path(word(BODY_PATHOBJ)),
                                              word(BODY_ENCODED), word(BODY_INSNS), word(BODY_INSNS_SIZE) & 0xFFFF_FFFF,
                                              word(BODY_SUCC_INDEX))
        return found

    def line(self, code: _Iseq, pc: int) -> int:
        """The line of the instruction before pc (pc points past the one running), as MRI's
        rb_vm_get_sourceline finds it: its entry in the instruction table, by the table's
        succinct index (iseq.c's succ_index_lookup)."""
        position = (pc - code.encoded) // 8
        position -= 1 if position > 0 else 0
        if code.size <= 1:
            return int.from_bytes(self.bytes(code.table, 4), "little", signed=True) if code.size else 0
        index = self._rank(code.succ_index, position)
        if not 1 <= index <= code.size:
            return 0
        return int.from_bytes(self.bytes(code.table + (index - 1) * INSN_INFO_SIZE, 4), "little", signed=True)

    def _rank(self, table: int, position: int) -> int:
        """How many instruction table entries start at or before `position`."""
        if position < IMMEDIATE:
            return (self.word(table + position // 9 * 8) >> (position % 9 * 7)) & 0x7F
        bit = position - IMMEDIATE
        # after the immediate part (6 words), blocks of 512 positions: rank (u32, padded), small ranks, 8 words
        block = table + IMMEDIATE // 9 * 8 + bit // 512 * 80
        rank, small_ranks = self.u32(block), self.word(block + 8)
        small = bit % 512 // 64
        small_rank = (small_ranks >> ((small - 1) * 9)) & 0x1FF if small else 0
        bits = (self.word(block + 16 + small * 8) << (63 - bit % 64)) & 0xFFFF_FFFF_FFFF_FFFF
        return rank + small_rank + bits.bit_count()
