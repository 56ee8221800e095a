"""tools/wrap_long_lines.py: each kind of rewrap on hand-made sources (exact output), the refusals,
idempotence and the AST check."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("wrap_long_lines", ROOT / "tools/wrap_long_lines.py")
wll = importlib.util.module_from_spec(_spec)
sys.modules["wrap_long_lines"] = wll
_spec.loader.exec_module(wll)

W = 40  # a small line length keeps the hand-made cases readable


def wrap(src: str, limit: int = W) -> str:
    out, _ = wll.wrap_source(src, limit)
    return out


def test_comment_line_is_rewrapped_keeping_indent_and_prefix() -> None:
    src = "def f():\n    # one two three four five six seven eight\n    return 1\n"
    assert wrap(src) == (
        "def f():\n    # one two three four five six seven\n    # eight\n    return 1\n"
    )
    doc = "#: alpha beta gamma delta epsilon zeta eta theta\nX = 1\n"
    assert wrap(doc) == "#: alpha beta gamma delta epsilon zeta\n#: eta theta\nX = 1\n"


def test_comment_overflow_joins_the_next_line_of_the_same_sentence() -> None:
    src = "# one two three four five six seven eight\n# nine ten\nx = 1\n"
    assert wrap(src) == "# one two three four five six seven\n# eight nine ten\nx = 1\n"
    # a new sentence (capital) or a bullet below is not joined
    src = "# one two three four five six seven eight\n# Nine ten\nx = 1\n"
    assert wrap(src) == "# one two three four five six seven\n# eight\n# Nine ten\nx = 1\n"


def test_rule_comment_is_shortened() -> None:
    assert wrap("# part " + "-" * 60 + "\nx = 1\n") == "# part " + "-" * 33 + "\nx = 1\n"


def test_trailing_comment_moves_above_and_pragmas_stay() -> None:
    src = "def f():\n    x = 1  # a comment that is far too long\n    return x\n"
    assert wrap(src) == (
        "def f():\n    # a comment that is far too long\n    x = 1\n    return x\n"
    )
    pragma = "import os, sys  # noqa: F401 E401 a long pragma comment\n"
    assert wrap(pragma) == pragma  # the code fits without the pragma: ruff does not flag it


def test_before_format_only_moves_trailing_comments() -> None:
    src = (
        "assert f(x) == 1  # a comment that is far too long here\n"
        "# a comment line that is long enough to need wrapping at forty\n"
        'Y = "a string that is long enough to need a split at forty"\n'
    )
    out, _ = wll.wrap_source(src, W, pre=True)
    assert out == "# a comment that is far too long here\n" + src.replace(
        "  # a comment that is far too long here", ""
    )


def test_docstring_prose_continuation_and_hanging_indent() -> None:
    src = (
        "def f(a):\n"
        '    """Summary line that is much too long here.\n'
        "\n"
        "    Args:\n"
        "        a: the argument with a long description.\n"
        "        b: short.\n"
        "\n"
        "    - a bullet that goes on beyond the limit.\n"
        '    """\n'
    )
    assert wrap(src, 44) == (
        "def f(a):\n"
        '    """Summary line that is much too long\n'
        "    here.\n"
        "\n"
        "    Args:\n"
        "        a: the argument with a long\n"
        "            description.\n"
        "        b: short.\n"
        "\n"
        "    - a bullet that goes on beyond the\n"
        "      limit.\n"
        '    """\n'
    )


def test_docstring_overflow_reflows_into_the_next_line() -> None:
    src = 'def f():\n    """Head.\n\n    aa bb cc dd ee ff gg hh ii jj kk\n    ll mm.\n    """\n'
    assert wrap(src, 30) == (
        'def f():\n    """Head.\n\n    aa bb cc dd ee ff gg hh ii\n    jj kk ll mm.\n    """\n'
    )


def test_a_prose_line_starting_with_an_ellipsis_is_prose() -> None:
    src = 'def f():\n    """Head.\n\n    ...) and more words that go past it.\n    """\n'
    assert wrap(src, 36) == (
        'def f():\n    """Head.\n\n    ...) and more words that go past\n    it.\n    """\n'
    )


def test_docstring_break_prefers_a_space_outside_inline_literals() -> None:
    src = 'def f():\n    """The code: ``{"a": 1, "b": 2}`` here."""\n'
    assert wrap(src, 36) == 'def f():\n    """The code:\n    ``{"a": 1, "b": 2}`` here."""\n'


def test_one_line_docstring_is_broken() -> None:
    src = 'def f():\n    """Return the thing that was asked for."""\n'
    assert wrap(src, 36) == 'def f():\n    """Return the thing that was\n    asked for."""\n'


@pytest.mark.parametrize(
    "block",
    [
        "    Example::\n\n        x = compute_something(with_a, long_list, of_arguments)\n",
        "    >>> compute_something(with_a, long_list, of_arguments)\n",
        "    | cell one of a table | cell two of a table |\n",
        "    +---+---+\n    | a cell of the table | another cell |\n",
        "    ====  ===============================================\n    a     b\n",
    ],
)
def test_literal_blocks_stay_and_get_a_noqa_after_the_string(block: str) -> None:
    src = f'def f():\n    """Head.\n\n{block}    """\n'
    out, notes = wll.wrap_source(src, W)
    assert out == src.replace('    """\n', '    """  # noqa: E501\n')
    assert notes.left and all("noqa on line" in why for _, why in notes.left)


def test_other_triple_quoted_string_keeps_its_value() -> None:
    src = 'TEXT = """\nalpha beta gamma delta epsilon zeta eta\n"""\n'
    out = wrap(src, 30)
    assert out == 'TEXT = """\nalpha beta gamma delta \\\nepsilon zeta eta\n"""\n'
    assert ast.literal_eval(out.split("=", 1)[1]) == ast.literal_eval(src.split("=", 1)[1])
    raw = 'TEXT = r"""\nalpha beta gamma delta epsilon zeta eta\n"""\n'
    assert wrap(raw, 30) == raw.replace('"""\n', '"""  # noqa: E501\n', 2).replace(
        'r"""  # noqa: E501', 'r"""', 1
    )


def test_string_in_brackets_is_split_in_place() -> None:
    src = 'raise ValueError(\n    "the value is wrong and here is why it is wrong"\n)\n'
    assert wrap(src) == (
        'raise ValueError(\n    "the value is wrong and here is "\n    "why it is wrong"\n)\n'
    )


def test_string_outside_brackets_gets_parentheses() -> None:
    src = 'MSG = "the value is wrong and here is why it is wrong"\n'
    assert wrap(src) == 'MSG = (\n    "the value is wrong and here is "\n    "why it is wrong"\n)\n'
    fits = 'MESSAGE_NAME = "the value is wrong: here is why"\n'
    assert wrap(fits) == 'MESSAGE_NAME = (\n    "the value is wrong: here is why"\n)\n'


def test_fstring_split_keeps_fields_whole_and_prefixes() -> None:
    src = 'raise ValueError(\n    f"got {value!r} with {len(items) + 1} items and more"\n)\n'
    out = wrap(src, 36)
    assert out == (
        "raise ValueError(\n"
        '    f"got {value!r} with "\n'
        '    f"{len(items) + 1} items and "\n'
        '    "more"\n'
        ")\n"
    )
    # a field holding spaces is never cut
    src = 'x = (\n    f"{a if flag else b} {c if flag else d} {e if flag else f}"\n)\n'
    assert wrap(src, 30) == (
        'x = (\n    f"{a if flag else b} "\n    f"{c if flag else d} "\n    f"{e if flag else '
        'f}"\n)\n'
    )


def test_single_quoted_pieces_take_ruffs_quotes() -> None:
    src = "x = (\n    'he said \"no\" and then it was over, at last'\n)\n"
    assert wrap(src, 36) == 'x = (\n    \'he said "no" and then it was \'\n    "over, at last"\n)\n'


def test_part_of_an_implicit_concatenation_flows_into_the_next_part() -> None:
    src = 'd = {\n    "key": "one two three four five six seven "\n    "eight",\n}\n'
    assert wrap(src) == 'd = {\n    "key": "one two three four five "\n    "six seven eight",\n}\n'
    src = 'raise ValueError(\n    f"{a} and {b} and some words after them "\n    "to end",\n)\n'
    assert wrap(src) == (
        'raise ValueError(\n    f"{a} and {b} and some words after "\n    "them to end",\n)\n'
    )
    # a plain part with braces cannot join an f-string piece with fields
    src = 'x = (\n    f"some words: {a} {b} and then {c} {d}"\n    "{to} end"\n)\n'
    assert wrap(src) == (
        'x = (\n    f"some words: {a} {b} and then {c} "\n    f"{d}"\n    "{to} end"\n)\n'
    )


def test_unfixable_code_line_gets_noqa_and_long_url_lines_are_left() -> None:
    src = "value = some_module.some_attribute.another_attribute_name\n"
    out, notes = wll.wrap_source(src, W)
    assert out == src.replace("\n", "  # noqa: E501\n")
    assert notes.noqa == [1]
    url = "# see https://example.org/a/very/long/path/to/a/page\nx = 1\n"
    assert wrap(url) == url  # E501 exempts a line ending with a URL


def test_existing_noqa_gets_e501_added() -> None:
    src = "from some_module.deeply.nested import name_a, name_b  # noqa: F401\n"
    assert wrap(src) == src.replace("F401", "F401, E501")


def test_idempotent_and_ast_equal_on_a_mixed_file() -> None:
    src = (
        '"""Module docstring whose first line is definitely longer than the limit allows."""\n'
        "\n"
        "# a comment line that is long enough to need wrapping at forty\n"
        "X = 1  # and a trailing comment that is much too long\n"
        'Y = f"{X} is the value, which the message explains at some length"\n'
        "\n"
        "\n"
        "def f(a):\n"
        '    """Do it.\n'
        "\n"
        "    Args:\n"
        "        a: an argument described in words beyond the limit.\n"
        '    """\n'
        '    return ("a string in brackets that is long enough to split", a)\n'
    )
    once = wrap(src)
    assert wrap(once) == once
    assert wll.normalized_dump(once) == wll.normalized_dump(src)
    assert all(len(line) <= W or "noqa" in line for line in once.splitlines())
    compile(once, "<wrapped>", "exec")


def test_a_change_to_the_ast_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    src = 'MSG = "alpha beta gamma delta epsilon zeta eta theta iota"\n'

    def bad_pass(text: str, limit: int, pre: bool = False) -> str:
        return text.replace("theta", "THETA", 1)

    monkeypatch.setattr(wll, "one_pass", bad_pass)
    with pytest.raises(ValueError, match="AST would change"):
        wll.wrap_source(src, W)


def test_the_command_leaves_a_refused_file_unchanged(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def f(:\n    pass  # a long comment that would otherwise move up\n")
    good = tmp_path / "good.py"
    good.write_text("X = 1  # a trailing comment that is much too long for forty\n")
    before = bad.read_text()
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools/wrap_long_lines.py"),
            "--line-length",
            "40",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert "REFUSED" in done.stdout and "bad.py" in done.stdout
    assert bad.read_text() == before
    assert good.read_text() == "# a trailing comment that is much too\n# long for forty\nX = 1\n"
    check = subprocess.run(
        [sys.executable, str(ROOT / "tools/wrap_long_lines.py"), "--check", str(good)],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0


def test_normalized_dump_ignores_only_docstring_whitespace() -> None:
    a = 'def f():\n    """a b"""\n    return "x y"\n'
    assert wll.normalized_dump(a) == wll.normalized_dump(a.replace('"""a b"""', '"""a\n    b"""'))
    assert wll.normalized_dump(a) != wll.normalized_dump(a.replace('"x y"', '"x  y"'))
