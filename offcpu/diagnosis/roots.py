"""What the waits that peers ended came down to: each wait's waker followed to what that waker
was itself waiting for, and on (wPerf's cascaded redistribution), to a thread on CPU, a device,
a timer or work from outside; worked out once per model for every finding (Context.root_shares)."""

from __future__ import annotations

from offcpu import _core
from offcpu.diagnosis.claims import RUNQUEUE, Claims
from offcpu.diagnosis.locktable import GENERIC_FUTEX
from offcpu.diagnosis.waits import Waits
from offcpu.model import Model
from offcpu.model.wakeups import CAUSE_WORDS, NEW, PEER, PREEMPTED_CAUSE, TIMER

ON_CPU = "a thread on CPU (or waiting for one)"
TIMED = "a timer (a sleep or a timeout)"
# What is left going round: rows whose waits were ended by peers that were themselves waiting
# on the first rows. Counted by rows, the chains of a lock's queue close on themselves (in
# time each goes back to a holder on CPU): wPerf calls such a cycle a knot, the threads taking
# turns at something none of them lets go of sooner.
IN_TURNS = "one another, in turns (their waits end in each other's)"
ROOT_ROUNDS = 2000  # at most: each round carries what is left of a chain one waker further
ROOT_SETTLED = 1e-6  # a round that moves no row's share by more than this ends the rounds
IN_TURNS_FROM = 1e-3  # less left going round than this is the rounding of the rounds


def root_shares(model: Model, waits: Waits, claims: Claims) -> dict[int, dict[str, float]]:
    """For every peer-ended row, what its blocked time came down to, as shares of it: the
    fixed point of "a row's roots are its wakers' overlapping waits' roots (their own kind
    for waits no peer ended), and a thread on CPU for the rest", reached round by round
    (each round follows the chains one waker further) until no share moves; what still
    goes round then is the rows' turns on one another (IN_TURNS)."""
    peers = [number for number, followed in enumerate(waits.followed) if followed]
    place = {number: at for at, number in enumerate(peers)}
    labels: dict[str, int] = {}
    own: list[tuple[int, int, float]] = []  # (row's place, label, share): the part no peer's wait carries
    carried: list[tuple[int, int, float]] = []  # (row's place, its waker's place, share): what a peer's wait carries
    for at, number in enumerate(peers):
        blocked_us = model.rows[number].blocked_us
        links = waits.links_by_waiter.get(number, ())
        overlapped = sum(overlap for _, overlap in links)
        # Sampled links are estimates that may add up to more than the row's own (estimated)
        # time: they share it then, so that no row hands on more than all of it.
        whole = max(blocked_us, overlapped)
        for waker_row, overlap in links:
            part = overlap / whole if whole else 0.0
            if waits.followed[waker_row]:
                carried.append((at, place[waker_row], part))
            else:
                own.append((at, labels.setdefault(root_words(waits, claims, waker_row), len(labels)), part))
        if blocked_us > overlapped:
            own.append((at, labels.setdefault(ON_CPU, len(labels)), (blocked_us - overlapped) / blocked_us))
    carried.sort()  # by waiter: the core sums each waiter's links together
    shares = _core.root_shares(len(peers), len(labels), own, carried, ROOT_ROUNDS, ROOT_SETTLED)
    names = list(labels)
    result = {}
    for at, number in enumerate(peers):
        row = {names[label]: float(share) for label, share in enumerate(shares[at]) if share > 0}
        in_turns = 1.0 - sum(row.values())
        if in_turns > IN_TURNS_FROM:
            row[IN_TURNS] = in_turns
        result[number] = row
    return result


def root_words(waits: Waits, claims: Claims, number: int) -> str:
    """A wait at the root of a chain: where it waited, or what ended it."""
    cls, claim = waits.classes[number], claims.of_row[number]
    if (claim is not None and claim.finding == RUNQUEUE) or cls.cause in (PREEMPTED_CAUSE, NEW):
        return ON_CPU
    if (cls.site is not None and cls.site.lock.kind == "sleep") or \
            (cls.cause == TIMER and (cls.site is None or cls.site.lock.kind == "condition")):
        return TIMED  # a sleep, or a timed wait that ran out: a JVM's Thread.sleep is a futex's timeout
    if cls.site is not None:
        return "a futex of the program's" if cls.site.lock.name == GENERIC_FUTEX else cls.site.lock.name
    if cls.cause == PEER:
        return "another thread of theirs"
    return f"a wait ended by {CAUSE_WORDS[cls.cause]}"
