"""The README and docs/ hold together: every page of docs/ is linked from the README,
and every relative link between them (and to files of the repository) leads somewhere,
down to the heading when it names one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def prose(page: Path) -> str:
    """The page without its code blocks, where brackets are code, not links."""
    return FENCE.sub("", page.read_text())


def links(page: Path) -> list[str]:
    return [target for target in LINK.findall(prose(page)) if not re.match(r"[a-z]+:", target)]


def anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation (backticks too) dropped,
    spaces made hyphens; letters, digits, '_' and '-' kept."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {anchor(heading) for heading in HEADING.findall(prose(page))}


def test_anchor_follows_github():
    assert anchor("Kernel frames are [unknown]") == "kernel-frames-are-unknown"
    assert anchor("The observer's cost") == "the-observers-cost"
    assert anchor("Reading perf.data") == "reading-perfdata"
    assert anchor("`offcpu check`: a gate for CI") == "offcpu-check-a-gate-for-ci"
    assert anchor("3. The wait-for graph and the wake-up chain") == "3-the-wait-for-graph-and-the-wake-up-chain"


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(README.parent / target.split("#")[0]).resolve() for target in links(README)}
    unlinked = [page.relative_to(ROOT).as_posix() for page in DOCS if page.resolve() not in linked]
    assert not unlinked, f"README.md does not link to {unlinked}"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_every_relative_link_leads_somewhere(page: Path):
    broken = []
    for target in links(page):
        path, _, fragment = target.partition("#")
        destination = (page.parent / path).resolve() if path else page
        if not destination.exists():
            shown = destination.relative_to(ROOT) if destination.is_relative_to(ROOT) else destination
            broken.append(f"{target}: no {shown}")
        elif fragment and destination.suffix == ".md" and fragment not in anchors(destination):
            broken.append(f"{target}: no heading #{fragment} in {destination.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_messages_lead_to_troubleshooting_headings_that_exist():
    # every more_in("anchor") in offcpu's code, and TRACEFS_ANCHOR, names a heading of the page
    source = "\n".join(path.read_text() for path in (ROOT / "offcpu").rglob("*.py"))
    used = set(re.findall(r'more_in\("([^"]+)"\)', source)) | set(re.findall(r'_ANCHOR = "([^"]+)"', source))
    assert len(used) >= 6 and used <= anchors(ROOT / "docs" / "troubleshooting.md"), used


def every_help() -> dict[str, str]:
    """The --help text of every command and subcommand, by its command line."""
    import click

    from offcpu.app import cli

    helps: dict[str, str] = {}

    def visit(command: click.Command, parent: click.Context | None, path: str) -> None:
        context = click.Context(command, info_name=path.rpartition(" ")[2], parent=parent)
        helps[path] = command.get_help(context)
        if isinstance(command, click.Group):
            for name in command.list_commands(context):
                sub = command.get_command(context, name)
                assert sub is not None, name
                visit(sub, context, f"{path} {name}")

    visit(cli, None, "offcpu")
    return helps


def test_help_names_the_docs_page_not_the_readme():
    # An installed offcpu has no README: --help says what it must, and names the page of docs/ for the rest
    helps = every_help()
    assert len(helps) >= 10
    assert not [path for path, text in helps.items() if "README" in text]
    named = {page for text in helps.values() for page in re.findall(r"docs/[\w-]+\.md", text)}
    assert named >= {"docs/check.md", "docs/locks.md", "docs/reports.md"}
    assert all((ROOT / page).is_file() for page in named), named
