"""docs/layout.md says where the code is, and the package keeps to it: every file the page
names exists, every module is in the table of its folder, few are left at the top, the tests'
folders are the package's, and no module imports one that imports it back."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import ROOT

LAYOUT = ROOT / "docs" / "layout.md"
PACKAGE = ROOT / "offcpu"
CORE = ROOT / "core"
ENTRY = re.compile(r"`([^`]+)`")
FOLDER = re.compile(r"`([\w/]+/)`")
# A path the page names anywhere: relative, starting at one of the repository's folders
PATH = re.compile(r"`((?:offcpu|core|tests|scripts|examples|docs|benchmarks)/[\w./-]*)`")


@dataclass
class Table:
    section: str  # "package": its paths are relative to offcpu/; "core": to the repository
    folder: str  # the folder its heading names ("" for none)
    entries: list[str] = field(default_factory=list)  # the paths in its first column


def tables() -> list[Table]:
    found: list[Table] = []
    section, folder, in_table = "", "", False
    for line in LAYOUT.read_text().splitlines():
        if line.startswith("## "):
            section = "package" if "`offcpu/`" in line else "core" if "`core/`" in line else ""
            folder = "core/" if section == "core" else ""
        elif line.startswith("**"):
            folders = FOLDER.findall(line.split(".**")[0])
            folder = folders[0] if folders else ""
        if section and line.startswith("|") and not in_table:
            found.append(Table(section, folder))
        if section and line.startswith("| `"):
            found[-1].entries.extend(ENTRY.findall(line.split("|")[1]))
        in_table = line.startswith("|")
    return found


def named() -> dict[str, set[str]]:
    """The paths in the first column of every table, by section."""
    found: dict[str, set[str]] = {"package": set(), "core": set()}
    for table in tables():
        found[table.section].update(table.entries)
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


def test_each_table_holds_the_files_of_its_folder():
    """A table whose heading names a folder holds that folder's files; the top's, none in a folder."""
    misplaced = [(table.folder, entry) for table in tables() for entry in table.entries
                 if not (entry.startswith(table.folder) if table.folder else "/" not in entry)]
    assert len(tables()) >= 10 and misplaced == []


def test_every_path_the_page_names_exists():
    paths = PATH.findall(LAYOUT.read_text())
    assert len(paths) > 10
    assert [path for path in paths if not (ROOT / path).exists()] == []


def test_every_module_is_in_the_tables():
    entries = named()
    unnamed = [path for path in package_files() if not is_named(path, entries["package"])]
    core_files = [str(path.relative_to(ROOT)) for folder in ("src", "tests") for pattern in ("*.rs", "*.c")
                  for path in (CORE / folder).rglob(pattern)]
    unnamed += [path for path in core_files if not is_named(path, entries["core"])]
    assert unnamed == []


def test_few_modules_are_left_at_the_top():
    """The top of the package holds what every step uses (the entry points, errors, files, the
    capture's formats and kinds, stacks); the rest is in a step's folder."""
    top = [path for path in package_files() if "/" not in path and path.endswith(".py")]
    assert len(top) <= 13, top


def test_the_tests_folders_are_the_packages():
    folders = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").exists()}
    for tests in (ROOT / "tests" / "unit", ROOT / "tests" / "integration"):
        theirs = {path.name for path in tests.iterdir() if path.is_dir() and path.name not in ("__pycache__", "golden")}
        assert theirs and theirs <= folders, tests


def imports_of(module: Path) -> set[str]:
    """The offcpu modules a module imports, anywhere in it (in functions, and for type
    checking alone, too): `from offcpu.a import b` is offcpu.a.b when that is a module."""
    found = set()
    for node in ast.walk(ast.parse(module.read_text())):
        assert not (isinstance(node, ast.ImportFrom) and node.level), f"{module}: a relative import"
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "offcpu":
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if is_module(submodule) else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == "offcpu")
    return found


def is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def packages_above(name: str) -> set[str]:
    """The packages whose __init__ runs before a module of theirs: offcpu.a.b.c imports offcpu.a.b
    and offcpu.a (offcpu's own __init__ imports nothing)."""
    parts = name.split(".")
    return {".".join(parts[:end]) for end in range(2, len(parts))}


def test_no_module_imports_one_that_imports_it_back():
    graph = {module_name(path): imports_of(path) | packages_above(module_name(path)) for path in PACKAGE.rglob("*.py")}
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


# What a recording's backend is called: only the capture kinds (offcpu/kinds.py) tell them apart,
# and recording/backends.py reads what the user typed (--backend bpf)
BACKEND_NAMES = frozenset({"bpf", "perf"})
KNOWS_THE_BACKENDS = frozenset({"kinds.py", "recording/backends.py"})


def compares_a_backend(node: ast.AST) -> bool:
    """A comparison (==, in, is...) or match case with a backend's name, or with a `backend` field."""
    operands: list[ast.AST]
    if isinstance(node, ast.Compare):
        operands = [node.left, *node.comparators]
    elif isinstance(node, ast.match_case):
        operands = [node.pattern]
    else:
        return False
    return any((isinstance(part, ast.Constant) and part.value in BACKEND_NAMES)
               or (isinstance(part, ast.Attribute) and part.attr == "backend")
               or (isinstance(part, ast.Name) and part.id.endswith("_BACKEND"))
               for operand in operands for part in ast.walk(operand))


def test_no_module_but_the_kinds_compares_a_backend():
    found = [f"{path.relative_to(PACKAGE)}:{node.lineno}" for path in sorted(PACKAGE.rglob("*.py"))
             if str(path.relative_to(PACKAGE)) not in KNOWS_THE_BACKENDS
             for node in ast.walk(ast.parse(path.read_text())) if compares_a_backend(node)]
    assert found == []


def test_the_backend_check_sees_a_comparison():
    """The check above finds what it looks for (not in a comment, nor a name given as a value)."""
    found = [compares_a_backend(node) for source in ('info.backend == "bpf"', 'x in ("perf", "y")',
                                                     'kind == BPF_BACKEND', '# info.backend == "bpf"',
                                                     'Backend("perf", why)')
             for node in ast.walk(ast.parse(source)) if isinstance(node, (ast.Compare, ast.Call))]
    assert found == [True, True, True, False]


# The step packages in the order data flows through them: a module imports only from its own
# package, from one before it, or from the shared modules at the top (ranked 0, below all). The
# entry point and the command group (cli.py, app.py, __main__.py) come after every command.
STEPS = ("machine", "recording", "reading", "model", "diagnosis", "gate", "renderers", "live", "commands")
ENTRY_POINTS = frozenset({"cli", "app", "__main__"})
def rank(module: str) -> int:
    """Where a module of the package stands in the order (offcpu.x.y: by x)."""
    top = module.split(".")[1] if "." in module else ""
    if top in STEPS:
        return STEPS.index(top) + 1
    return len(STEPS) + 1 if top in ENTRY_POINTS else 0


def test_imports_follow_the_steps_order():
    against = sorted((module_name(path), imported) for path in PACKAGE.rglob("*.py")
                     for imported in imports_of(path) if rank(imported) > rank(module_name(path)))
    assert len(list(PACKAGE.rglob("*.py"))) > 80  # the package was read
    assert against == []


def test_the_order_ranks_the_shared_modules_below_every_step():
    assert rank("offcpu.kinds") == rank("offcpu._core") == 0
    assert rank("offcpu.machine.system") < rank("offcpu.recording.session") < rank("offcpu.reading.symbols")
    assert rank("offcpu.renderers.text") < rank("offcpu.commands.record") < rank("offcpu.app")


def test_no_file_of_the_core_is_over_800_lines():
    files = [path for path in (CORE / "src").rglob("*") if path.suffix in (".rs", ".c")]
    assert len(files) > 10
    assert [str(path.relative_to(CORE)) for path in files if len(path.read_text().splitlines()) > 800] == []
