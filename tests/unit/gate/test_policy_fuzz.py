"""The policy reader on random and mutated TOML, for a few seconds: whatever the file
holds, reading it gives a Policy or an OffcpuError of one line, never anything else."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from offcpu.errors import OffcpuError
from offcpu.gate.policy import Policy, load_policy
from tests.conftest import ROOT

MUTATIONS = 600  # a fixed number: a time bound tried fewer on a loaded machine and failed its counts
SEED = 20261122  # fixed, so that a failure is the same on every run
POLICY_DOC = ROOT / "docs" / "check.md"
SEEDS = [
    "fail_above_info = []\n",
    "mmap_lock.max_share = 0.05\nrunqueue.max_p99_ms = 1\n",
    "[regression]\nmax_share_growth = 0.05\nmax_relative_growth = 0.5\n"
    "[regression.mmap_lock]\nmax_share_growth = 0.02\n",
    "lock_contention = { max_share = 0.1, max_ms_per_s = 250.5 }\n"
    "[regression]\nblocked = { max_relative_growth = 1 }\n",
    'fail_above_info = ["mmap_lock", "io_wait"]\nrunqueue.max_p99_ms = 20\nthread_churn.max_per_second = 50\n',
    '[[lock]]\nname = "my_lock"\nkind = "lock"\nwait = ["my_lock_wait*"]\nmax_share = 0.1\n',
]
# TOML's tokens and the policy's words, for mutations to splice in
PIECES = ["[", "]", "[[", "]]", "{", "}", "=", ",", ".", "\"", "'", "'''", '"""', "\n", "#", " ", "\\", "\\u0000",
          "true", "false", "0", "-1", "1e400", "nan", "-inf", "0x1F", "0o7", "0b1", "1_000", "3.14", "+0.0",
          "1979-05-27T07:32:00Z", "1979-05-27", "07:32:00", "1979-05-27 07:32:00.999999-07:00",
          "mmap_lock", "regression", "blocked", "idle", "max_share", "max_ms_per_s", "max_p99_ms",
          "max_per_second", "max_share_growth", "max_relative_growth", "fail_above_info", "runqueue", "a.b.c",
          "[[lock]]", "name", "kind", "wait", "callers", "release", "retry", "finding", "*", "?", "[a-",
          "\"quoted key\"", "\x00", "\x7f", "\u2028", "é", "\ud800"]


def documented_policy() -> str:
    """The policy example of docs/check.md, between ```toml and ```."""
    text = POLICY_DOC.read_text()
    start = text.index("```toml\n") + len("```toml\n")
    return text[start:text.index("```", start)]


def mutated(text: str, rng: random.Random) -> str:
    for _ in range(rng.randint(0, 3)):  # none: the file as it was, a policy or not
        at = rng.randint(0, len(text))
        choice = rng.randrange(6)
        if choice == 0:
            text = text[:at] + rng.choice(PIECES) + text[at:]
        elif choice == 1:
            text = text[:at] + text[at + rng.randint(1, 20):]
        elif choice == 2:
            text = text[:at] + chr(rng.randint(0, 0x2FFF)) + text[at + 1:]
        elif choice == 3:
            lines = text.splitlines(keepends=True) or [""]
            line = rng.randrange(len(lines))
            text = "".join(lines[:line] + [lines[line]] * rng.randint(2, 5) + lines[line + 1:])
        elif choice == 4:
            depth = rng.choice([1, 10, 100, 400, 1000, 3000])
            opening, closing = rng.choice([("[", "]"), ("{a = ", "}"), ("[{a = [", "]}]")])
            text = text[:at] + opening * depth + closing * depth + text[at:]
        else:
            text = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 30)))
    return text


def test_the_policy_reader_gives_a_policy_or_an_error(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    seeds = SEEDS + [documented_policy()]
    path = tmp_path / "policy.toml"
    outcomes: Counter[str] = Counter()
    for _ in range(MUTATIONS):
        text = mutated(rng.choice(seeds), rng)
        path.write_bytes(text.encode("utf-8", errors="surrogatepass"))  # a lone surrogate: not UTF-8
        try:
            policy = load_policy(path)
        except OffcpuError as error:
            assert "\n" not in error.format_message(), repr(text)
            outcomes["error"] += 1
        except Exception as error:  # noqa: BLE001 - anything else is what this test looks for
            pytest.fail(f"{type(error).__name__}: {error} on {text[:2000]!r}")
        else:
            assert isinstance(policy, Policy)
            json.dumps(policy.to_json(), allow_nan=False)  # the check's JSON verdict holds it
            outcomes["policy"] += 1
    # both kinds of file were tried, and enough of them to mean something
    assert outcomes["policy"] >= 20 and outcomes["error"] >= 200, outcomes
