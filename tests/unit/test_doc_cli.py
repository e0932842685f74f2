"""docs/operations.md's `rks` reference names every command and every option as spark_recoverable_sink/ops/cli.py
defines them, and no option the command does not have."""

from __future__ import annotations

import re

import click

from spark_recoverable_sink.ops.cli import main

from ..docs import REPO, read, split_blocks

OPERATIONS = f"{REPO}/docs/operations.md"


def _sections() -> dict[str, str]:
    """``### rks <command>`` -> the prose and code of its section (up to the next heading)."""
    text = read(OPERATIONS)
    out: dict[str, str] = {}
    for m in re.finditer(r"^### rks ([a-z-]+)\n(.*?)(?=^#{1,3} )", text + "\n# end", re.M | re.S):
        out[m.group(1)] = m.group(2)
    return out


def _flags(command: click.Command) -> set[str]:
    return {o for p in command.params if isinstance(p, click.Option) for o in p.opts if o.startswith("--")} - {"--help"}


def test_every_command_and_option_is_in_the_reference():
    sections = _sections()
    assert set(sections) == set(main.commands), sorted(set(sections) ^ set(main.commands))
    for name, command in main.commands.items():
        usage = sections[name].strip().split("\n\n")[0]  # the first paragraph: `rks NAME ...`
        assert usage.startswith(f"`rks {name} "), usage
        missing = [f for f in sorted(_flags(command)) if f not in sections[name]]
        assert missing == [], f"rks {name}: {missing} not in docs/operations.md"
        named = set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", usage))
        assert named <= _flags(command), f"rks {name}: {sorted(named - _flags(command))} are not its options"


def test_the_global_options_and_the_exit_codes_are_said():
    blocks, prose = split_blocks(read(OPERATIONS), OPERATIONS)
    text = "\n".join(prose)
    for flag in _flags(main):
        assert flag in text
    assert "**0** done" in text and "**1** done in part" in text and "**2** nothing done" in text
