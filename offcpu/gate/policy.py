"""The policy `offcpu check` applies: limits per finding, and how much growth
against a baseline is tolerated. Read from TOML; a file changes the defaults
only in the keys it sets.

    fail_above_info = ["mmap_lock", "futex_contention"]   # these fail as warning or critical
    mmap_lock.max_share = 0.05        # of the threads' time, waiting for work left out
    futex_contention.max_ms_per_s = 200
    runqueue.max_p99_ms = 20
    thread_churn.max_per_second = 50

    strict = true                     # a check near its limit (over it by no more than the
                                      # measurement's uncertainty) fails; by default it passes
    [regression]                      # against --baseline: a finding's time a run (or a second) fails
    max_relative_growth = 0.5         # ... grown by more than this of the baseline's (0.5 = +50%)
    max_share_growth = 0.01           # ... and by more than this of the threads' time (0.01 = 1%)

    [regression.mmap_lock]            # one finding's own tolerances, over those above
    max_relative_growth = 0.25
    [regression.blocked]              # blocked time, waits for work left out
    max_relative_growth = 1

    [[lock]]                          # the lock table's entries (offcpu.diagnosis.locktable): a lock
    name = "Ruby GVL"                 # of offcpu's, or one of yours, with limits on its waits
    max_share = 0.1
"""

from __future__ import annotations

import datetime
import json
import math
import string
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from offcpu.diagnosis.locktable import LockTable, default_table, parse_toml, read_toml_text, table_with
from offcpu.diagnosis.rules import RULES
from offcpu.errors import OffcpuError

RULE_IDS = tuple(rule.id for rule in RULES)
# The finding of threads waiting for work: never a problem, so never gated by default
# nor compared with a baseline.
WAITS_FOR_WORK = "idle"
# The findings a default policy does not gate, and why; every other finding fails the
# check as soon as it is warning or critical.
NOT_GATED_BY_DEFAULT = {
    "runqueue": "CPU saturation: a benchmark that keeps the CPUs busy is doing its job (gate it with "
                "runqueue.max_p99_ms, and its growth against a baseline with [regression.runqueue])",
    WAITS_FOR_WORK: "threads waiting for work are never a problem",
    "futex_unknown": "the kind of these waits cannot be told from the stacks (record with --call-graph dwarf)",
    "handoff": "threads handing work to each other (a pipe, a queue) is how a program is built, not a lock",
    "busy_peer": "a stage that waits for a busier one (gzip behind tar, a client behind its server, a server behind "
                 "its load generator) says which one sets the pace, which a benchmark's own load may do by design "
                 "(gate it with fail_above_info)",
}
DEFAULT_FAIL_ABOVE_INFO = tuple(rule for rule in RULE_IDS if rule not in NOT_GATED_BY_DEFAULT)
# The baseline comparison of blocked time, waits for work left out, beside the findings';
# [regression.blocked] sets its own tolerances.
BLOCKED = "blocked"
COMPARED = tuple(rule for rule in RULE_IDS if rule != WAITS_FOR_WORK) + (BLOCKED,)


@dataclass(frozen=True)
class Limits:
    """The limits on one finding; None: not checked."""

    max_share: float | None = None  # Finding.share_of_wall: of the time of the threads it is about (0..1)
    max_ms_per_s: float | None = None  # off-CPU milliseconds per second of recording, all threads together
    max_p99_ms: float | None = None  # runqueue only: p99 wakeup-to-run delay
    max_per_second: float | None = None  # thread_churn only: threads created a second


# Which limits each finding takes: every finding max_share and max_ms_per_s, two of them one more.
COMMON_KEYS = ("max_share", "max_ms_per_s")
EXTRA_KEYS = {"runqueue": ("max_p99_ms",), "thread_churn": ("max_per_second",)}


@dataclass(frozen=True)
class Tolerance:
    """How much a time per unit of work (offcpu.gate.verdict.Unit) may grow against the
    baseline: it fails when it grows past both."""

    max_share_growth: float = 0.01  # of the run's threads' time (0.01 = 1%): a floor for rare waits
    max_relative_growth: float = 0.5  # of the baseline's (0.5 = +50%)


@dataclass(frozen=True)
class Regression:
    default: Tolerance = Tolerance()
    overrides: dict[str, Tolerance] = field(default_factory=dict)  # a COMPARED name -> its own tolerances

    def tolerance(self, name: str) -> Tolerance:
        return self.overrides.get(name, self.default)

    def to_json(self) -> dict:
        """As the policy file has it: the default tolerances, then a table per override."""
        return {**vars(self.default), **{name: vars(tolerance) for name, tolerance in self.overrides.items()}}


TOLERANCE_KEYS = tuple(item.name for item in fields(Tolerance))


@dataclass(frozen=True)
class Policy:
    fail_above_info: tuple[str, ...] = DEFAULT_FAIL_ABOVE_INFO
    limits: dict[str, Limits] = field(default_factory=dict)  # finding id -> its limits
    regression: Regression = Regression()
    source: str = "defaults"  # the file it was read from, over the defaults
    locks: LockTable = field(default_factory=default_table)  # the lock table, with the file's [[lock]] entries
    strict: bool = False  # a check near its limit fails (else it passes, and says it is near)

    def to_json(self) -> dict:
        return {
            "source": self.source,
            "strict": self.strict,
            "fail_above_info": list(self.fail_above_info),
            "limits": {rule: {key: value for key, value in vars(limits).items() if value is not None}
                       for rule, limits in self.limits.items()},
            "lock_limits": {name: {key: getattr(lock, key) for key in ("max_share", "max_ms_per_s")
                                   if getattr(lock, key) is not None}
                            for name, lock in self.locks.limits().items()},
            "regression": self.regression.to_json(),
        }


def load_policy(path: Path | None) -> Policy:
    """The defaults, changed by the keys `path` sets. OffcpuError (exit 2) naming the
    key and its line for anything that is not a policy."""
    if path is None:
        return Policy()
    text = read_toml_text(path, "policy")
    data = parse_toml(text, f"policy {path}", "a policy")
    return replace(_Reader(path, text).policy(data), locks=table_with(str(path), text, data))


class _Reader:
    """Turns parsed TOML into a Policy, with errors that point into the file."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.lines = _key_lines(text)

    def error(self, key: tuple[str, ...], problem: str) -> OffcpuError:
        """Names the line of the key, or of the nearest key around it (an inline table's)."""
        line = next((self.lines[key[:end]] for end in range(len(key), 0, -1) if key[:end] in self.lines), None)
        where = f"{self.path}, line {line}" if line else str(self.path)
        return OffcpuError(f"policy {where}: {'.'.join(key)} {problem}")

    def policy(self, data: dict) -> Policy:
        policy = Policy(source=str(self.path))
        limits: dict[str, Limits] = {}
        for key, value in data.items():
            if key == "fail_above_info":
                policy = replace(policy, fail_above_info=self.rule_ids((key,), value))
            elif key == "strict":
                if not isinstance(value, bool):
                    raise self.error((key,), f"must be true or false, not {_kind(value)}")
                policy = replace(policy, strict=value)
            elif key == "regression":
                policy = replace(policy, regression=self.regression(self.table((key,), value)))
            elif key in RULE_IDS:
                limits[key] = self.limits(key, self.table((key,), value))
            elif key != "lock":  # [[lock]] entries: offcpu.diagnosis.locktable reads them
                raise self.error((key,), f"is not a policy key; use finding ids ({', '.join(RULE_IDS)}), "
                                         "fail_above_info, strict, [regression] or [[lock]]")
        return replace(policy, limits=limits)

    def table(self, key: tuple[str, ...], value: object) -> dict:
        if not isinstance(value, dict):
            raise self.error(key, f"must be a table (for example [{'.'.join(key)}]), not {_kind(value)}")
        return value

    def rule_ids(self, key: tuple[str, ...], value: object) -> tuple[str, ...]:
        if not isinstance(value, list):
            raise self.error(key, f'must be an array of finding ids, such as ["mmap_lock"], not {_kind(value)}')
        other = next((item for item in value if not isinstance(item, str)), None)
        if other is not None:
            raise self.error(key, f"must be an array of finding ids (strings), but it holds {_kind(other)}")
        unknown = [item for item in value if item not in RULE_IDS]
        if unknown:
            raise self.error(key, f"names {unknown[0]!r}, which is not a finding id ({', '.join(RULE_IDS)})")
        return tuple(value)

    def limits(self, rule: str, table: dict) -> Limits:
        allowed = COMMON_KEYS + EXTRA_KEYS.get(rule, ())
        values = {}
        for key, value in table.items():
            if key not in allowed:
                raise self.error((rule, key), f"is not a limit of {rule}; it takes {', '.join(allowed)}")
            values[key] = self.number((rule, key), value, share=key == "max_share")
        return Limits(**values)

    def regression(self, table: dict) -> Regression:
        """The default tolerances, then each finding's (or blocked time's) own over them."""
        tolerances = {key: value for key, value in table.items() if key in TOLERANCE_KEYS}
        default = self.tolerance(("regression",), tolerances, Tolerance())
        overrides = {}
        for name, value in table.items():
            if name in tolerances:
                continue
            if name not in COMPARED:
                raise self.error(("regression", name), f"is neither a tolerance ({', '.join(TOLERANCE_KEYS)}) nor "
                                                       f"a table for one of {', '.join(COMPARED)}")
            overrides[name] = self.tolerance(("regression", name), self.table(("regression", name), value), default)
        return Regression(default, overrides)

    def tolerance(self, table: tuple[str, ...], values: dict, over: Tolerance) -> Tolerance:
        read = {}
        for key, value in values.items():
            if key not in TOLERANCE_KEYS:
                raise self.error((*table, key), f"is not a regression tolerance; use {', '.join(TOLERANCE_KEYS)}")
            read[key] = self.number((*table, key), value, share=key == "max_share_growth")
        return replace(over, **read)

    def number(self, key: tuple[str, ...], value: object, share: bool) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(key, f"must be a number, not {_kind(value)}")
        if not math.isfinite(value):
            raise self.error(key, f"must be a finite number, not {_kind(value)}")
        if value < 0 or (share and value > 1):
            bounds = "from 0 to 1 (0.05 is 5%)" if share else "0 or more"
            raise self.error(key, f"must be {bounds}, not {value}")
        return float(value)


def _kind(value: object) -> str:
    """What a TOML value is, in TOML's words, with the value itself when it is short."""
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    kind = _SCALAR_KINDS.get(type(value), "a value")
    if isinstance(value, datetime.datetime) and value.tzinfo is not None:
        kind = "an offset date-time"
    shown = _toml_text(value)
    return f"{kind} ({shown})" if len(shown) <= 40 else kind


_SCALAR_KINDS = {bool: "a boolean", str: "a string", int: "an integer", float: "a float",
                 datetime.datetime: "a local date-time", datetime.date: "a local date", datetime.time: "a local time"}


def _toml_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    return str(value)  # numbers: inf and nan are TOML's words too


# What a key may be spelt with, dotted and quoted parts and the spaces around them included.
_KEY_CHARACTERS = frozenset(string.ascii_letters + string.digits + "_-. \t\"'")


def _key_lines(text: str) -> dict[tuple[str, ...], int]:
    """Where each key is set: (table..., key) -> line number. Enough of TOML for a
    policy's tables and dotted keys; a key it cannot place is named without a line."""
    lines: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    for number, line in enumerate(text.splitlines(), start=1):
        if (header := _table_header(line)) is not None:
            table = _dotted(header)
            lines.setdefault(table, number)
        elif (key := _assigned_key(line)) is not None:
            path = table + _dotted(key)
            for end in range(1, len(path) + 1):
                lines.setdefault(path[:end], number)
    return lines


# Both read a line in one pass, with no regular expression: a line of spaces that is neither
# took one with nested repetitions cubic time (1,500 spaces: 1.1 s).
def _table_header(line: str) -> str | None:
    """NAME of a '[NAME]' line, a comment allowed after it; None for any other line."""
    stripped = line.strip()
    if not stripped.startswith("["):
        return None
    name, closed, rest = stripped[1:].partition("]")
    rest = rest.strip()
    if not closed or "[" in name or not name.strip() or (rest and not rest.startswith("#")):
        return None
    return name


def _assigned_key(line: str) -> str | None:
    """KEY of a 'KEY = value' line; None for any other line."""
    key, equals, _ = line.partition("=")
    if not equals or not key.strip() or not set(key) <= _KEY_CHARACTERS:
        return None
    return key


def _dotted(key: str) -> tuple[str, ...]:
    return tuple(part.strip().strip("\"'") for part in key.split("."))
