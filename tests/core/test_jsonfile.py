"""The one JSON reader, fuzzed at the bytes: whatever a file holds (text of any code point, integers of
any size, a key given twice, another encoding, a byte-order mark, random bytes), reading it gives the
document or UsageError naming the file and where; never another exception.

The suite tries a few examples per property (repeatable); `VITEXPORT_FUZZ_EXAMPLES=N` tries N each with
a random seed."""

from __future__ import annotations

import json
import os
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vitexport.core.errors import UsageError
from vitexport.core.jsonfile import MAX_DIGITS, parse, read_json, where

FUZZ_EXAMPLES = int(os.environ.get("VITEXPORT_FUZZ_EXAMPLES", "0"))
SETTINGS = settings(max_examples=FUZZ_EXAMPLES or 60, deadline=None, database=None, derandomize=not FUZZ_EXAMPLES,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
NAMED = "report r.json"

# Text of any code point: lone surrogates and control characters included.
ANY_TEXT = st.text(alphabet=st.characters(exclude_categories=()), max_size=12)
SCALARS = st.one_of(st.none(), st.booleans(), st.floats(), ANY_TEXT, st.integers(),
                    st.integers(min_value=10**300, max_value=10**600), st.integers(min_value=-10**600, max_value=-10**300))


DOCUMENTS = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                          st.dictionaries(ANY_TEXT, inner, max_size=4)), max_leaves=12)


def rendered(document) -> bytes:
    """JSON text Python would write for `document` (non-ASCII escaped, so a lone surrogate is `\\ud800`)."""
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        return json.dumps(document).encode("ascii")
    finally:
        sys.set_int_max_str_digits(limit)


def unreadable(document) -> bool:
    """Whether the document holds what the reader refuses: a lone surrogate or a control character in
    text (tab, newline and carriage return aside), or a number of more than MAX_DIGITS digits."""
    if isinstance(document, str):
        return any(0xD800 <= ord(c) <= 0xDFFF or (ord(c) < 32 and c not in "\t\n\r") for c in document)
    if isinstance(document, bool) or document is None or isinstance(document, float):
        return False
    if isinstance(document, int):
        return len(str(abs(document))) > MAX_DIGITS
    if isinstance(document, list):
        return any(unreadable(x) for x in document)
    return any(unreadable(k) or unreadable(v) for k, v in document.items())


def refused(data: bytes) -> str:
    with pytest.raises(UsageError) as caught:
        parse(data, NAMED)
    message = str(caught.value)
    assert message.startswith(f"cannot read {NAMED}") or message.startswith(NAMED), message
    assert "\n" not in message
    return message


@SETTINGS
@given(DOCUMENTS)
def test_any_document_is_read_whole_or_refused_naming_where(document):
    data = rendered(document)
    if unreadable(document):
        message = refused(data)
        assert "beyond what any field holds" in message or "which no field takes" in message
    else:
        assert json.dumps(parse(data, NAMED), allow_nan=True) == json.dumps(document, allow_nan=True)


@SETTINGS
@given(st.dictionaries(st.text(min_size=1, max_size=6), st.integers(-5, 5), min_size=1, max_size=4),
       st.lists(st.sampled_from(["results", "cases"]), max_size=2), st.integers(-100, 100), st.data())
def test_a_key_given_twice_is_refused_naming_it_and_its_path(inner, outer, value, data):
    key = data.draw(st.sampled_from(sorted(inner)))
    text = json.dumps(inner)[:-1] + f", {json.dumps(key)}: {value}}}"  # the key again, last
    for name in reversed(outer):
        text = f'{{"{name}": [{text}]}}'
    message = refused(text.encode())
    place = where(tuple(step for name in outer for step in (name, 0)) + (key,))
    assert f"{place}: the key {key!r} is given twice" in message


@SETTINGS
@given(st.integers(MAX_DIGITS + 1, 20_000), st.booleans())
def test_a_number_of_any_length_is_refused_naming_its_place(digits, fraction):
    number = "9" * digits + (".5" if fraction else "")
    message = refused(f'{{"results": [{{"latency_ms": {{"p50": {number}}}}}]}}'.encode())
    assert f"results[0].latency_ms.p50: a number of {len(number)} digits" in message


@SETTINGS
@given(DOCUMENTS, st.sampled_from(["utf-8-sig", "utf-16", "utf-16-le", "utf-32", "latin-1", "cp1252"]))
def test_another_encoding_or_a_byte_order_mark_is_refused_or_read_as_what_it_says(document, encoding):
    text = json.dumps(document, ensure_ascii=False) if not unreadable(document) else '"é"'
    try:
        data = text.encode(encoding)
    except UnicodeEncodeError:
        return
    try:
        value = parse(data, NAMED)
    except UsageError as e:
        assert "\n" not in str(e) and NAMED in str(e)
        return
    # Only bytes that are also UTF-8 without a mark are read, and then as the same document.
    assert not data.startswith((b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")) and data.decode("utf-8") == text
    assert json.dumps(value) == json.dumps(json.loads(text))


@SETTINGS
@given(st.binary(max_size=200))
def test_any_bytes_are_read_or_refused_in_one_line(data):
    try:
        parse(data, NAMED)
    except UsageError as e:
        assert "\n" not in str(e)


@pytest.mark.parametrize("data, said", [
    (b'{"label": "\\ud800"}', "label: the text holds a lone surrogate U+D800"),
    (b'{"a": {"b\\u001b[2J": 1}}', 'a."b\\u001b[2J": the key holds the control character U+001B'),
    (b'{"p50": -1, "p50": 75.3}', "p50: the key 'p50' is given twice"),
    (b"\xef\xbb\xbf{}", "a UTF-8 byte-order mark"),
    (b'{"model": "caf\xe9"}', "not readable JSON (not UTF-8 text: byte 0xe9 at line 1, column 15)"),
    (b'{"a": ' + b"1" * 5000 + b"}", "a: a number of 5000 digits"),
    (b"[" * 100_000, "nested more than"),
])
def test_each_refusal_says_what_and_where(tmp_path, data, said):
    path = tmp_path / "r.json"
    path.write_bytes(data)
    with pytest.raises(UsageError) as caught:
        read_json(path, "report")
    assert said in str(caught.value) and str(path) in str(caught.value)


def test_text_a_file_may_hold_is_read():
    assert parse('{"a": "tab\\tnew\\nline é ✓ 𝛑", "b": 1e308, "c": 12345678901234567890}'.encode(), NAMED) == \
        {"a": "tab\tnew\nline é ✓ 𝛑", "b": 1e308, "c": 12345678901234567890}
