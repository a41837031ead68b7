"""Reading a policy: the defaults, a file over them key by key, and errors that point into the file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from offcpu.diagnosis.rules import RULES
from offcpu.errors import OffcpuError
from offcpu.gate.policy import (
    BLOCKED,
    COMPARED,
    DEFAULT_FAIL_ABOVE_INFO,
    EXTRA_KEYS,
    NOT_GATED_BY_DEFAULT,
    RULE_IDS,
    WAITS_FOR_WORK,
    Limits,
    Policy,
    Regression,
    Tolerance,
    load_policy,
)


def policy_from(tmp_path, text: str) -> Policy:
    path = tmp_path / "offcpu.toml"
    path.write_text(text)
    return load_policy(path)


def error_from(tmp_path, text: str) -> str:
    with pytest.raises(OffcpuError) as raised:
        policy_from(tmp_path, text)
    assert raised.value.exit_code == 2
    return raised.value.format_message()


def test_without_a_file_the_defaults():
    policy = load_policy(None)
    assert policy == Policy() and policy.source == "defaults"
    assert "runqueue" not in policy.fail_above_info and "idle" not in policy.fail_above_info
    assert set(DEFAULT_FAIL_ABOVE_INFO) == {"deadlock", "stuck", "mmap_lock", "stack_cache_lock", "thread_churn",
                                            "lock_contention",
                                            "serialization", "io_wait", "thread_limits", "cpu_throttling"}
    assert policy.limits == {} and policy.regression == Regression(Tolerance(0.01, 0.5), {})


def test_the_finding_ids_the_policy_names_are_the_rules():
    # Every rule is gated by default but those named with a reason; a renamed rule fails here
    ids = [rule.id for rule in RULES]
    assert set(NOT_GATED_BY_DEFAULT) | set(EXTRA_KEYS) | {WAITS_FOR_WORK} <= set(ids)
    assert list(DEFAULT_FAIL_ABOVE_INFO) == [rule for rule in ids if rule not in NOT_GATED_BY_DEFAULT]
    assert BLOCKED not in ids and set(COMPARED) == set(ids) - {WAITS_FOR_WORK} | {BLOCKED}


def test_a_file_changes_only_the_keys_it_sets(tmp_path):
    policy = policy_from(tmp_path, "mmap_lock.max_share = 0.05\n[regression]\nmax_relative_growth = 1\n")
    assert policy.fail_above_info == DEFAULT_FAIL_ABOVE_INFO  # not set: the default
    assert policy.limits == {"mmap_lock": Limits(max_share=0.05)}
    assert policy.regression == Regression(Tolerance(max_share_growth=0.01, max_relative_growth=1.0))
    assert policy.source.endswith("offcpu.toml")


def test_every_key(tmp_path):
    policy = policy_from(tmp_path, """
fail_above_info = []
runqueue.max_p99_ms = 20
thread_churn.max_per_second = 50

[lock_contention]
max_share = 0.1
max_ms_per_s = 250.5

[regression]
max_share_growth = 0.02
max_relative_growth = 0.25

[regression.mmap_lock]
max_share_growth = 0.01

[regression.blocked]
max_share_growth = 0.1
max_relative_growth = 1
""")
    assert policy.fail_above_info == ()
    assert policy.limits == {"runqueue": Limits(max_p99_ms=20.0), "thread_churn": Limits(max_per_second=50.0),
                             "lock_contention": Limits(max_share=0.1, max_ms_per_s=250.5)}
    assert policy.regression == Regression(Tolerance(0.02, 0.25), {"mmap_lock": Tolerance(0.01, 0.25),
                                                                   BLOCKED: Tolerance(0.1, 1.0)})
    assert policy.to_json()["limits"]["lock_contention"] == {"max_share": 0.1, "max_ms_per_s": 250.5}
    assert policy.to_json()["regression"] == {"max_share_growth": 0.02, "max_relative_growth": 0.25,
                                              "mmap_lock": {"max_share_growth": 0.01, "max_relative_growth": 0.25},
                                              "blocked": {"max_share_growth": 0.1, "max_relative_growth": 1.0}}


def test_a_finding_s_own_tolerances_are_over_the_file_s_whatever_the_order(tmp_path):
    # Given an override written before the tolerances it falls back on (dotted keys allow it)
    policy = policy_from(tmp_path, "regression.lock_contention.max_relative_growth = 2\n"
                                   "regression.max_share_growth = 0.1\n")
    # Then it takes the file's share growth, not the built-in one; the others take the file's
    assert policy.regression.tolerance("lock_contention") == Tolerance(0.1, 2.0)
    assert policy.regression.tolerance("mmap_lock") == policy.regression.tolerance(BLOCKED) == Tolerance(0.1, 0.5)


@pytest.mark.parametrize("text, words", [
    ("mmap_lock.max_shar = 0.05\n", ["line 1", "mmap_lock.max_shar", "takes max_share, max_ms_per_s"]),
    ("\n\n[runqueue]\nmax_p99_ms = 'fast'\n", ["line 4", "runqueue.max_p99_ms", "must be a number", "string"]),
    ("[thread_churn]\nmax_per_second = true\n", ["line 2", "thread_churn.max_per_second", "a boolean (true)"]),
    ("mmap_lock.max_share = 5\n", ["line 1", "from 0 to 1"]),
    ("lock_contention.max_ms_per_s = -1\n", ["line 1", "0 or more"]),
    ("mmap_lock.max_share = nan\n", ["line 1", "must be a finite number", "nan"]),
    ("mmap_lock.max_p99_ms = 3\n", ["mmap_lock.max_p99_ms", "is not a limit of mmap_lock"]),
    ("# a comment\nmmap = {max_share = 0.1}\n", ["line 2", "mmap is not a policy key", "fail_above_info"]),
    ("mmap_lock = 0.05\n", ["line 1", "mmap_lock must be a table"]),
    ("fail_above_info = 'mmap_lock'\n", ["line 1", "array of finding ids", "not a string (\"mmap_lock\")"]),
    ("fail_above_info = [\n  'mmap_lock',\n  'futex',\n]\n", ["line 1", "'futex'", "not a finding id"]),
    ("[regression]\nmax_growth = 0.1\n", ["line 2", "regression.max_growth", "max_share_growth"]),
    ("[regression]\nmax_share_growth = 2\n", ["line 2", "from 0 to 1"]),
    ("regression = 1\n", ["line 1", "regression must be a table"]),
    ("[regression]\nmax_share_growth = 0.1\n[regression.mmap]\nmax_share_growth = 0.02\n",
     ["line 3", "regression.mmap is neither a tolerance", "mmap_lock", "blocked"]),
    ("[regression.idle]\nmax_share_growth = 0.02\n", ["line 1", "regression.idle is neither", "lock_contention"]),
    ("\n[regression.blocked]\nmax_share = 0.02\n", ["line 3", "regression.blocked.max_share",
                                                       "use max_share_growth, max_relative_growth"]),
    ("[regression.mmap_lock]\nmax_relative_growth = '50%'\n", ["line 2", "regression.mmap_lock.max_relative_growth",
                                                                 "must be a number", "a string"]),
    ("[regression]\nmmap_lock = 0.02\n", ["line 2", "regression.mmap_lock must be a table"]),
    ("# inline\nmmap_lock = { max_share = 0.05, max_sharez = 1 }\n", ["line 2", "mmap_lock.max_sharez"]),
    ("[regression]\nblocked = { max_share_growth = true }\n", ["line 2", "regression.blocked.max_share_growth",
                                                               "a boolean (true)"]),
    # values named in TOML's words, never in Python's
    ("mmap_lock.max_share = 1979-05-27T07:32:00Z\n", ["line 1", "must be a number", "an offset date-time "
                                                      "(1979-05-27T07:32:00+00:00)"]),
    ("mmap_lock.max_share = 1979-05-27T07:32:00\n", ["must be a number", "a local date-time (1979-05-27T07:32:00)"]),
    ("mmap_lock.max_share = 1979-05-27\n", ["must be a number", "a local date (1979-05-27)"]),
    ("mmap_lock.max_share = 07:32:00\n", ["must be a number", "a local time (07:32:00)"]),
    ("mmap_lock.max_share = [0.05]\n", ["must be a number", "an array"]),
    ("lock_contention.max_ms_per_s = inf\n", ["line 1", "must be a finite number", "inf"]),
    ("fail_above_info = [1]\n", ["line 1", "array of finding ids", "holds an integer (1)"]),
    ("fail_above_info = ['mmap_lock', ['io_wait']]\n", ["line 1", "array of finding ids", "holds an array"]),
    ("fail_above_info = {a = 1}\n", ["line 1", "array of finding ids", "not a table"]),
    ("\nstrict = 1\n", ["line 2", "strict must be true or false", "an integer (1)"]),
])
def test_errors_name_the_key_and_its_line(tmp_path, text, words):
    message = error_from(tmp_path, text)
    assert "\n" not in message
    for word in words:
        assert word in message, message


def test_toml_syntax_errors_say_where(tmp_path):
    message = error_from(tmp_path, "[mmap_lock\nmax_share = 0.1\n")
    assert "is not TOML" in message and "line 1" in message


@pytest.mark.parametrize("content", [None, b"\xff\xfe\x00"])
def test_unreadable_files(tmp_path, content):
    path = tmp_path / "policy.toml"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(OffcpuError, match=r"the policy file .* (is not text|\(No such file or directory\))"):
        load_policy(path)


@pytest.mark.parametrize("opening, closing", [("[", "]"), ("{a = ", "}")], ids=["arrays", "inline tables"])
def test_values_nested_too_deeply_are_an_error(tmp_path, opening, closing):
    message = error_from(tmp_path, f"fail_above_info = {opening * 2000}{closing * 2000}\n")
    assert "too deeply" in message and "\n" not in message


def test_a_file_too_big_for_a_policy_is_not_read_whole(tmp_path):
    path = tmp_path / "policy.toml"
    path.write_text("# a comment\n" * 100_000)
    with pytest.raises(OffcpuError, match="over 1 MiB"):
        load_policy(path)


def test_strict_is_off_unless_the_file_turns_it_on(tmp_path):
    assert not Policy().strict and not policy_from(tmp_path, "mmap_lock.max_share = 0.05\n").strict
    assert policy_from(tmp_path, "strict = true\n").strict
    assert policy_from(tmp_path, "strict = true\n").to_json()["strict"] is True


@pytest.mark.parametrize("line", [" " * 15_000 + "# a comment", " " * 15_000 + "[ mmap_lock" + " " * 15_000 + "]"],
                         ids=["spaces then a comment", "a header among spaces"])
def test_a_long_line_of_spaces_is_read_at_once(tmp_path, line):
    # Given a policy line that is neither a header nor a key (cubic time with the regular expressions
    # it was read with: minutes at 15,000 spaces), then a key set wrongly
    message = error_from(tmp_path, f"{line}\nmax_share = 5\n")
    # Then the key is named with its line, well within the time the test runner allows
    assert "line 2: " in message and "max_share" in message, message


def test_the_default_exemptions_are_said_alike_in_the_help_and_the_docs():
    # The findings the default policy does not gate are listed once, in the code
    from offcpu.commands.check import check

    exempt = set(NOT_GATED_BY_DEFAULT)
    [policy_help] = [param.help for param in check.params if param.name == "policy_path"]
    said = re.search(r"above info but ([a-z_, ]+)\]", policy_help)
    assert said and set(said[1].split(", ")) == exempt, policy_help
    # docs/check.md names each in its comment on fail_above_info, and lists the others as the default
    docs = (Path(__file__).resolve().parents[3] / "docs" / "check.md").read_text()
    start = docs.index("# Default: every finding but")
    comment = docs[start:docs.index("fail_above_info = [", start)]
    assert {rule for rule in RULE_IDS if re.search(rf"\b{rule}\b", comment)} == exempt, comment
    listed = re.search(r"fail_above_info = \[([^\]]*)\]", docs[start:])
    assert listed and re.findall(r'"([a-z_]+)"', listed[1]) == list(DEFAULT_FAIL_ABOVE_INFO)
