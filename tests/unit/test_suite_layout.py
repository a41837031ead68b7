"""The test suite's own layout: what test modules share lives in helper modules."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parents[1]


def test_no_test_module_imports_from_another() -> None:
    # a test module imported by another runs its tests' imports (and its fixtures) twice, and
    # hides what it shares: tests.helpers, tests.fixtures and the conftest modules hold that
    imported = sorted(
        f"{path.relative_to(TESTS)}: {node.module}"
        for path in TESTS.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module
        and node.module.startswith("tests.") and node.module.rsplit(".", 1)[-1].startswith("test_"))
    assert imported == []
