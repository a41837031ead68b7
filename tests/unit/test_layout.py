"""docs/layout.md says where the code is, and the package keeps to it: every file its tables
name exists, every module is named there, and no module imports one that imports it back."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import ROOT

LAYOUT = ROOT / "docs" / "layout.md"
PACKAGE = ROOT / "offcpu"
CORE = ROOT / "core"
ENTRY = re.compile(r"`([^`]+)`")


def named() -> dict[str, set[str]]:
    """The paths in the first column of each table, by the section they are in ("package":
    relative to offcpu/, "core": to the repository)."""
    found: dict[str, set[str]] = {"package": set(), "core": set()}
    section = ""
    for line in LAYOUT.read_text().splitlines():
        if line.startswith("## "):
            section = "package" if "`offcpu/`" in line else "core" if "`core/`" in line else ""
        elif section and line.startswith("| `"):
            found[section].update(ENTRY.findall(line.split("|")[1]))
    return found


def is_named(path: str, entries: set[str]) -> bool:
    """Named itself, or under a folder that is (an entry ending in '/')."""
    return path in entries or any(entry.endswith("/") and path.startswith(entry) for entry in entries)


def only_a_docstring(module: Path) -> bool:
    body = ast.parse(module.read_text()).body
    return len(body) == 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)


def package_files() -> list[str]:
    """The package's modules and data, relative to offcpu/; a package's __init__.py that holds
    nothing but its docstring is the package's, not a module of its own."""
    files = [path for pattern in ("*.py", "*.pyi", "*.toml") for path in PACKAGE.rglob(pattern)]
    return sorted(str(path.relative_to(PACKAGE)) for path in files
                  if not (path.name == "__init__.py" and path.parent != PACKAGE and only_a_docstring(path)))


def test_the_tables_name_the_files_that_exist():
    entries = named()
    assert len(entries["package"]) > 60 and len(entries["core"]) > 10  # the tables were read
    missing = [entry for entry in entries["package"] if not (PACKAGE / entry).exists()]
    missing += [entry for entry in entries["core"] if not (ROOT / entry).exists()]
    assert missing == []


def test_every_module_is_in_the_tables():
    entries = named()
    unnamed = [path for path in package_files() if not is_named(path, entries["package"])]
    core_files = [str(path.relative_to(ROOT)) for folder in ("src", "tests") for pattern in ("*.rs", "*.c")
                  for path in (CORE / folder).rglob(pattern)]
    unnamed += [path for path in core_files if not is_named(path, entries["core"])]
    assert unnamed == []


def test_few_modules_are_left_at_the_top():
    """The top of the package holds what every step uses; the rest is in a step's folder."""
    top = [path for path in package_files() if "/" not in path and path.endswith(".py")]
    assert len(top) <= 12, top


def imports_of(module: Path) -> set[str]:
    """The offcpu modules a module imports, anywhere in it (in functions, and for type
    checking alone, too): `from offcpu.a import b` is offcpu.a.b when that is a module."""
    found = set()
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "offcpu":
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if module_path(submodule) else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == "offcpu")
    return found


def module_path(name: str) -> Path | None:
    path = ROOT.joinpath(*name.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_module_imports_one_that_imports_it_back():
    graph = {module_name(path): imports_of(path) for path in PACKAGE.rglob("*.py")}
    assert len(graph) > 80  # the package was read
    cycles = []
    for start in graph:
        # every path from start, one import further each round, until none comes back to it
        seen, frontier = set(), {start}
        while frontier:
            frontier = {after for name in frontier for after in graph.get(name, ()) if after not in seen}
            seen |= frontier
        if start in seen:
            cycles.append(start)
    assert cycles == []
