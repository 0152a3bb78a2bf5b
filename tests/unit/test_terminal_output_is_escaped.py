"""Text from the cluster reaches the terminal with its control characters written as ``\\xNN``."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from cw_cli.cli.errors import handle_errors
from cw_cli.cli.plain import printable, table
from cw_cli.errors import Rejected


@pytest.mark.parametrize(
    "text,shown",
    [
        ("plain text, é, 日本, emoji 🙂", "plain text, é, 日本, emoji 🙂"),
        ("\x1b]0;title\x07", r"\x1b]0;title\x07"),  # OSC: sets the window title
        ("a\x1b[2Jb", r"a\x1b[2Jb"),  # CSI: clears the screen
        ("\x9b31m", r"\x9b31m"),  # the one-byte C1 CSI
        ("progress\rdone", r"progress\x0ddone"),  # a carriage return would overwrite the line
        ("a\x7fb\x00c", r"a\x7fb\x00c"),
        ("two\nlines\tand tab", r"two\x0alines\x09and tab"),
    ],
)
def test_control_characters_are_written_as_escapes(text, shown):
    assert printable(text) == shown


def test_a_multi_line_message_keeps_its_lines_and_tabs_but_not_escapes():
    assert printable("first\n\tsecond\x1b[1A", lines=True) == "first\n\tsecond\\x1b[1A"


def test_table_cells_are_escaped_and_aligned_on_what_is_printed():
    text = table(["NAME", "REASON"], [["a\x1b[2J", "x"], ["longer-name", "y\nz"]])
    lines = text.splitlines()
    assert "\x1b" not in text and len(lines) == 3
    assert lines[1] == r"a\x1b[2J      x"  # padded on the escaped width
    assert lines[2] == r"longer-name   y\x0az"  # a newline stays in its cell


def test_an_error_quoting_the_cluster_is_printed_escaped():
    @click.command()
    @handle_errors
    def failing() -> None:
        raise Rejected('apply Job r-trainer: admission webhook said "\x1b]0;owned\x07"', hint="look\x1b[2J")

    result = CliRunner().invoke(failing, [])
    assert result.exit_code != 0
    assert "\x1b" not in result.stderr and "\x07" not in result.stderr
    assert r'said "\x1b]0;owned\x07"' in result.stderr and r"look\x1b[2J" in result.stderr
