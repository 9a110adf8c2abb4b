"""planner/formats/shell.py: shell text split into words exactly as shlex splits it, in linear time."""

import re
import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.errors import PlanError
from planner.formats import shell
from planner.formats.shell import split, words


def _shlex(text: str) -> list[str] | str:
    try:
        return shlex.split(text, comments=True)
    except ValueError as error:
        return str(error)


def _split(text: str) -> list[str] | str:
    try:
        return split(text)
    except ValueError as error:
        return str(error)


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet="ab '\"\\#\n\t\r=$\x0b", max_size=24))
def test_words_and_errors_are_shlexs(text):
    assert _split(text) == _shlex(text)


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            'vllm serve m --tp 2  # a comment\n--x \'a b\' "c \\" d" e\\ f',
            ["vllm", "serve", "m", "--tp", "2", "--x", "a b", 'c " d', "e f"],
        ),
        ("a'' '' \"\" b#c d", ["a", "", "", "b"]),  # quotes alone make a word; a # in a word starts a comment
        ('"a\\b\\\\c"', ["a\\b\\c"]),  # in double quotes a backslash escapes only " and itself
        ("'unclosed", "No closing quotation"),
        ('"ends in \\', "No escaped character"),
        ("a \\", "No escaped character"),
    ],
)
def test_quoting_escapes_comments_and_errors(text, expected):
    assert _split(text) == expected == _shlex(text)


def test_a_long_word_is_one_match():
    """shlex builds a word a character at a time (900 kB: 15 s a split); here it is one regex match."""
    assert split("vllm serve " + "a" * 900_000) == ["vllm", "serve", "a" * 900_000]
    assert len(split("a " * 300_000)) == 300_000


def test_unsplittable_text_is_the_configs_error():
    with pytest.raises(PlanError) as err:
        words("vllm serve 'm")
    assert (err.value.field, err.value.rule) == ("config", "is not shell text shlex can split (No closing quotation)")


def test_lines_join_a_quoted_string_over_lines():
    text = "A=\"\n  --x 1\n  --y 'it''s'\n\"\n# comment\nB='# not a comment\n' run $A\necho \"#\" # done\n"
    assert shell.lines(text) == ["A=\" --x 1 --y 'it''s' \"", "B='# not a comment ' run $A", 'echo "#" # done']


def test_match_end_of_a_pattern_that_matches_everywhere():
    blanks = re.compile(r"[ \t\r\n]*")
    assert shell.match_end(blanks, "a  \t\nb", 1) == 5  # the run of blanks after "a"
    assert shell.match_end(blanks, "ab", 1) == 1  # the empty match: where it started
    with pytest.raises(ValueError, match="must match the empty string"):
        shell.match_end(re.compile(r"x"), "ab", 0)
