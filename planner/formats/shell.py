"""Shell text as the command-line formats read it (torchtitan, Megatron-LM, Hugging Face scripts, vLLM, SGLang):
backslash continuations joined, comments dropped, words split as the shell splits them (shlex's POSIX rules),
and the `VAR=value` assignments before a program split off."""

from __future__ import annotations

import re

from planner.errors import bad

# a shell variable assignment (`CUDA_VISIBLE_DEVICES=0,1 vllm serve ...`, `export NCCL_DEBUG=INFO`)
ASSIGNMENT = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=")
# Shell text as shlex.split(text, comments=True) reads it: blanks and comments between words; a word of unquoted
# text, 'single-quoted' text (as written), "double-quoted" text (a backslash escapes only " and \) and
# backslash-escaped characters. One match a word, without backtracking: shlex builds a word a character at a
# time, in time quadratic in its length.
_BETWEEN = r"(?:[ \t\r\n]++|\#[^\n]*+\n?)*+"
_QUOTES = r"""'([^']*+)'|"([^"\\]*+(?:\\[\s\S][^"\\]*+)*+)"|\\([\s\S])"""
_WORD = re.compile(rf"""{_BETWEEN}((?:[^ \t\r\n'"\\\#]++|{_QUOTES})++)""")
_BLANKS = re.compile(_BETWEEN)
_QUOTED = re.compile(_QUOTES)
_IN_DOUBLE_QUOTES = re.compile(r'\\(["\\])')


def joined(text: str) -> str:
    """The text with its backslash continuations joined."""
    return text.replace("\\\r\n", " ").replace("\\\n", " ")


def lines(text: str) -> list[str]:
    """The text's logical lines (continuations joined, and the lines of a quoted string spanning several, as in
    `ARGS="\n --num-layers 32\n"`, joined by a blank: the words an unquoted $ARGS splits into), stripped, without
    blank and comment lines."""
    out: list[str] = []
    quote = ""
    for line in (line.strip() for line in joined(text).splitlines()):
        if quote:
            out[-1] += " " + line
        elif line and not line.startswith("#"):
            out.append(line)
        else:
            continue
        quote = _open_quote(line, quote)
    return out


def _open_quote(line: str, quote: str) -> str:
    """The quote (' or ") still open at the end of `line` where it starts inside `quote` ("": none); shell rules:
    nothing escapes inside single quotes, a backslash escapes the next character elsewhere, # outside quotes at a
    word's start begins a comment."""
    i = 0
    while i < len(line):
        char = line[i]
        if quote == "'":
            quote = "" if char == "'" else quote
        elif char == "\\":
            i += 1
        elif quote:
            quote = "" if char == '"' else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            break
        i += 1
    return quote


def split(text: str) -> list[str]:
    """The words of shell text, exactly as shlex.split(text, comments=True) gives them, in time linear in the
    text; ValueError with shlex's words where a quote is not closed or the text ends in a backslash."""
    found: list[str] = []
    pos = 0
    while word := _WORD.match(text, pos):
        pos = word.end()
        quoted = "'" in word[1] or '"' in word[1] or "\\" in word[1]
        found.append(_QUOTED.sub(_unquoted, word[1]) if quoted else word[1])
    end = match_end(_BLANKS, text, pos)
    if end < len(text):  # a quote never closed, or a last backslash that escapes nothing (the odd one of a run)
        backslashes = len(text) - len(text.rstrip("\\"))
        raise ValueError("No escaped character" if text[end] in '\\"' and backslashes % 2 else "No closing quotation")
    return found


def match_end(pattern: re.Pattern[str], text: str, pos: int) -> int:
    """Where `pattern`, one that matches everywhere (the empty string at worst), ends when matched at `pos`."""
    found = pattern.match(text, pos)
    if found is None:
        raise ValueError(f"{pattern.pattern!r} must match the empty string")
    return found.end()


def _unquoted(quoted: re.Match) -> str:
    single, double, escaped = quoted.groups()
    return single if single is not None else escaped if escaped is not None else _IN_DOUBLE_QUOTES.sub(r"\1", double)


def words(text: str) -> list[str]:
    """The text's words as the shell splits them (continuations joined, comments dropped); PlanError naming
    `config` where they cannot be split (an unclosed quote)."""
    try:
        return split(joined(text))
    except ValueError as error:
        raise bad("config", text.strip()[:80], f"is not shell text shlex can split ({error})") from None


def environment(tokens: list[str]) -> tuple[list[str], list[str]]:
    """(the `VAR=value` assignments that start the command, the rest of its words)."""
    count = next((i for i, token in enumerate(tokens) if not ASSIGNMENT.match(token)), len(tokens))
    return tokens[:count], tokens[count:]
