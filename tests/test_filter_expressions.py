"""The filter language (SPEC §13) without Redis: what an expression means over a message's
tag and properties, SQL's NULL rules, the parser's errors with their columns, and the
checks on tags and properties."""

from __future__ import annotations

import numpy
import pytest
from hypothesis import given
from hypothesis import strategies as st

import rmq
from rmq.filters import compile_filter, evaluate
from rmq.properties import check_properties, check_tag
from rmq.storage.codec import decode_member, decode_parts, encode_member, encode_properties

EU = {"region": "eu", "price": 12, "weight": 2.5, "vip": True, "name": "it's"}

# (where, properties, tag, the expression's value: True, False or None for UNKNOWN)
TABLE = [
    ("region = 'eu'", EU, None, True),
    ("region <> 'eu'", EU, None, False),
    ("price > 10", EU, None, True),
    ("price >= 12 AND price <= 12", EU, None, True),
    ("price < 12", EU, None, False),
    ("weight BETWEEN 2 AND 3", EU, None, True),
    ("weight NOT BETWEEN 2 AND 3", EU, None, False),
    ("price BETWEEN 13 AND 20", EU, None, False),
    ("price = 12.0", EU, None, True),  # ints and floats are numbers alike
    ("region IN ('us', 'eu')", EU, None, True),
    ("region NOT IN ('us', 'eu')", EU, None, False),
    ("price IN (1, 2)", EU, None, False),
    ("name = 'it''s'", EU, None, True),  # '' is a quote inside a string
    ("vip = TRUE", EU, None, True),
    ("vip <> FALSE", EU, None, True),
    ("TRUE", {}, None, True),
    ("FALSE", {}, None, False),
    ("NOT (region = 'eu' OR price > 100)", EU, None, False),
    ("region = 'us' OR price > 10 AND vip = TRUE", EU, None, True),  # AND binds tighter
    ("(region = 'us' OR price > 10) AND vip = FALSE", EU, None, False),
    ("price > -5 AND price < 1e3", EU, None, True),
    ("region = 'EU'", EU, None, False),  # strings compare exactly
    ("Region = 'eu'", EU, None, None),  # property names are case-sensitive: missing
    ("region = 'eu' and price > 10", EU, None, True),  # keywords in any case
    # a missing property is NULL; comparing with NULL is UNKNOWN, and so is its NOT
    ("colour = 'red'", EU, None, None),
    ("NOT colour = 'red'", EU, None, None),
    ("colour <> 'red'", EU, None, None),
    ("colour IS NULL", EU, None, True),
    ("colour IS NOT NULL", EU, None, False),
    ("region IS NULL", EU, None, False),
    ("colour IN ('red')", EU, None, None),
    ("colour BETWEEN 1 AND 2", EU, None, None),
    # three-valued AND and OR: FALSE AND UNKNOWN is FALSE, TRUE OR UNKNOWN is TRUE
    ("colour = 'red' AND region = 'us'", EU, None, False),
    ("colour = 'red' AND region = 'eu'", EU, None, None),
    ("colour = 'red' OR region = 'eu'", EU, None, True),
    ("colour = 'red' OR region = 'us'", EU, None, None),
    # values of different types never compare: UNKNOWN, not FALSE
    ("price = '12'", EU, None, None),
    ("region > 1", EU, None, None),
    ("vip = 1", EU, None, None),
    ("price IN ('12', 12)", EU, None, True),
    # only numbers are ordered
    ("region > 'a'", EU, None, None),
    ("vip > FALSE", EU, None, None),
    # TAG is the message's tag, NULL when it has none
    ("TAG = 'red'", {}, "red", True),
    ("TAG IN ('blue', 'red')", {}, "red", True),
    ("TAG = 'red'", {}, None, None),
    ("TAG IS NULL", {}, None, True),
    ("TAG IS NOT NULL AND price > 1", {"price": 2}, "x", True),
    # comparing two properties; NOT of a FALSE AND UNKNOWN is TRUE
    ("price > weight", EU, None, True),
    ("price NOT BETWEEN colour AND weight", EU, None, True),
    ("price BETWEEN colour AND 100", EU, None, None),
]


@pytest.mark.parametrize(("where", "properties", "tag", "expected"), TABLE)
def test_an_expression_has_the_value_sql_gives_it(where, properties, tag, expected):
    import json
    program = json.loads(compile_filter(where=where).program)
    assert evaluate(program, tag, properties) is expected
    assert compile_filter(where=where).matches(tag, properties) is (expected is True)


@pytest.mark.parametrize(("tags", "tag", "passes"), [
    ("*", None, True), ("*", "a", True), ("a", "a", True), ("a", "b", False),
    ("a || b", "b", True), ("a||b||c", "c", True), ("a || b", None, False),
    (" a ||  b ", "a", True),
])
def test_a_tag_expression_accepts_the_tags_it_names(tags, tag, passes):
    assert compile_filter(tags=tags).matches(tag, {}) is passes


def test_tags_and_where_must_both_accept():
    both = compile_filter(tags="a", where="price > 1")
    assert both.matches("a", {"price": 2})
    assert not both.matches("b", {"price": 2})
    assert not both.matches("a", {"price": 0})


def test_no_filter_and_star_compile_to_no_program():
    assert compile_filter().program == ""
    assert compile_filter(tags="*").program == ""
    assert compile_filter(tags="*").matches(None, {})


@pytest.mark.parametrize(("where", "column", "expected"), [
    ("price >", 8, "a value"),
    ("price = = 1", 9, "a value"),
    ("(price = 1", 11, "')', AND or OR"),
    ("price = 1)", 10, "AND, OR or the end"),
    ("price IN ()", 11, "a value"),
    ("price IN (1, other)", 14, "a literal"),
    ("price IN 1", 10, "'(' opening the IN list"),
    ("x IS NOT", 9, "NULL"),
    ("x IS 1", 6, "NOT or NULL"),
    ("price ! 1", 7, "a value, an operator or a parenthesis"),
    ("price BETWEEN 1 OR 2", 17, "AND (of BETWEEN x AND y)"),
    ("price NOT = 1", 11, "BETWEEN or IN"),
    ("price", 6, "a comparison"),
    ("region = 'eu", 10, "a value, an operator or a parenthesis"),
    ("AND price = 1", 1, "a value"),
    ("price = 9007199254740993", 9, "an integer within +-2**53"),
    ("   ", 1, "an expression"),
    ("NOT " * 40 + "TRUE", 129, "at most 32 nested"),
])
def test_an_invalid_where_names_its_column_and_what_was_expected(where, column, expected):
    with pytest.raises(rmq.errors.InvalidFilter) as raised:
        compile_filter(where=where)
    assert raised.value.column == column
    assert expected in raised.value.expected
    assert f"column {column}" in str(raised.value)
    assert isinstance(raised.value, ValueError)


@pytest.mark.parametrize(("tags", "column"), [("a |", 1), ("a || ", 6), ("* || a", 1),
                                              ("a || b c", 6), ("", 1)])
def test_an_invalid_tag_expression_names_its_column(tags, column):
    with pytest.raises(rmq.errors.InvalidFilter) as raised:
        compile_filter(tags=tags)
    assert raised.value.column == column


def test_a_filter_that_is_not_a_string_is_refused():
    with pytest.raises(rmq.errors.InvalidFilter):
        compile_filter(where=5)
    with pytest.raises(rmq.errors.InvalidFilter):
        compile_filter(tags=["a"])


@pytest.mark.parametrize("tag", ["", "a b", "é", "x" * 129, 5, b"a"])
def test_a_bad_tag_is_refused(tag):
    with pytest.raises(rmq.errors.InvalidTag):
        check_tag(tag)


@pytest.mark.parametrize(("properties", "named"), [
    ([("a", 1)], "dict"),
    ({"1a": 1}, "'1a'"),
    ({"a-b": 1}, "'a-b'"),
    ({"tag": 1}, "'tag'"),  # a filter keyword could not be referred to
    ({"and": 1}, "'and'"),
    ({"a": None}, "'a'"),
    ({"a": [1]}, "'a'"),
    ({"a": b"x"}, "'a'"),
    ({"a": float("nan")}, "'a'"),
    ({"a": 2**53 + 1}, "'a'"),
    ({"a": "\ud800"}, "'a'"),
    ({f"p{i}": i for i in range(65)}, "65 properties"),
])
def test_bad_properties_are_refused_naming_the_problem(properties, named):
    with pytest.raises(rmq.errors.InvalidProperties) as raised:
        check_properties(properties)
    assert named in str(raised.value)


def test_properties_are_put_in_one_order_so_equal_dicts_encode_alike():
    first = encode_properties(check_properties({"b": 1, "a": "x"}))
    second = encode_properties(check_properties({"a": "x", "b": 1}))
    assert first == second
    assert encode_properties(check_properties({"a": 1})) != \
        encode_properties(check_properties({"a": 1.0}))


def test_a_message_without_tag_or_properties_is_stored_as_compactly_as_before():
    assert encode_member(b"body", None) == b"body"
    assert encode_member(b"body", None, None, b"") == b"body"
    assert encode_member(b"body", b"k") == b"\0\0\0\0\x01kbody"


values = st.one_of(st.text(max_size=8), st.booleans(), st.integers(-2**53, 2**53),
                   st.floats(allow_nan=False, allow_infinity=False))
names = st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True).filter(
    lambda n: n.upper() not in rmq.properties.KEYWORDS)


@given(body=st.binary(max_size=20), key=st.none() | st.binary(max_size=8),
       tag=st.none() | st.from_regex(r"[A-Za-z0-9._-]{1,12}", fullmatch=True),
       properties=st.dictionaries(names, values, max_size=5))
def test_a_member_gives_back_what_was_encoded(body, key, tag, properties):
    pairs = check_properties(properties)
    member = encode_member(body, key, tag, encode_properties(pairs))
    parts = decode_parts(member)
    assert (parts.body, parts.key, parts.tag) == (body, key, tag)
    assert parts.properties == dict(pairs)
    assert all(type(parts.properties[n]) is type(v) for n, v in pairs)
    assert decode_member(member) == (body, key)


@pytest.mark.parametrize(("where", "column"), [
    ("a = \u0663", 5),  # ARABIC-INDIC DIGIT THREE
    ("a = \uff13", 5),  # FULLWIDTH DIGIT THREE
    ("a = 1\u0663", 6),  # an ASCII number does not run on into other digits
    ("a =\u00a01", 4),  # NO-BREAK SPACE
    ("a = 1\u2003AND b = 2", 6),  # EM SPACE
    ("\u00e9t\u00e9 = 1", 1),  # a property name is ASCII, as properties' names are
    ("a\u0663 = 1", 2),
])
def test_a_where_reads_only_ascii_digits_spaces_and_letters(where, column):
    with pytest.raises(rmq.errors.InvalidFilter) as raised:
        compile_filter(where=where)
    assert raised.value.column == column
    assert f"column {column}" in str(raised.value)


def test_a_tag_expression_is_separated_by_ascii_spaces_only():
    with pytest.raises(rmq.errors.InvalidFilter) as raised:
        compile_filter(tags="a ||\u00a0b")
    assert raised.value.column == 5
    assert compile_filter(tags="a ||\tb").tags == "a ||\tb"


@pytest.mark.parametrize(("tags", "where", "column"), [
    (None, "a = '\ud800'", 6),
    (None, "a = 'x' OR b = 'y\udfff'", 18),
    ("a || \ud800", None, 6),
    ("\udc80", None, 1),
])
def test_an_expression_that_is_not_valid_unicode_is_an_invalid_filter(tags, where, column):
    with pytest.raises(rmq.errors.InvalidFilter) as raised:
        compile_filter(tags=tags, where=where)
    assert raised.value.column == column


@pytest.mark.parametrize("name", ["\u00e9t\u00e9", "a\u0663", "\uff41", "a\ud800"])
def test_a_property_name_is_ascii(name):
    with pytest.raises(rmq.errors.InvalidProperties, match="invalid property name"):
        check_properties({name: 1})


def test_a_tag_that_is_not_valid_unicode_is_an_invalid_tag():
    with pytest.raises(rmq.errors.InvalidTag):
        check_tag("a\ud800")


def test_properties_are_stored_as_the_plain_value_they_equal():
    import enum
    from fractions import Fraction

    class Level(enum.IntEnum):
        HIGH = 3

    class Name(str):
        def __str__(self) -> str:
            return "other"

    pairs = dict(check_properties({"level": Level.HIGH, "half": Fraction(1, 2),
                                   "name": Name("eu"), "flag": True, "n": 2, "x": 0.25}))
    assert pairs == {"level": 3, "half": 0.5, "name": "eu", "flag": True, "n": 2, "x": 0.25}
    assert [type(pairs[n]) for n in ("level", "half", "name", "flag")] == [int, float, str,
                                                                           bool]


def test_numpy_scalars_are_stored_as_ints_and_floats():
    pairs = dict(check_properties({"a": numpy.float64(1.5), "b": numpy.int32(-7),
                                   "c": numpy.float32(0.5), "d": numpy.uint64(2**53)}))
    assert pairs == {"a": 1.5, "b": -7, "c": 0.5, "d": 2**53}
    assert [type(pairs[n]) for n in "abcd"] == [float, int, float, int]
    assert encode_properties(check_properties({"a": numpy.float64(1.5)})) == \
        encode_properties(check_properties({"a": 1.5}))
    for bad, named in ((numpy.int64(2**60), "outside"), (numpy.float64("nan"), "not finite"),
                       (numpy.bool_(True), "numpy.bool")):
        with pytest.raises(rmq.errors.InvalidProperties, match=named):
            check_properties({"a": bad})


def test_a_decimal_property_is_refused_rather_than_rounded():
    from decimal import Decimal
    with pytest.raises(rmq.errors.InvalidProperties,
                       match=r"'p' must be .* got decimal.Decimal \(convert it"):
        check_properties({"p": Decimal("0.1")})


@pytest.mark.parametrize(("where", "notes"), [
    ("region = eu", ["eu is read as a property name (region = eu compares two properties); "
                     "quote a string: region = 'eu'"]),
    ("price > 10 AND (region <> eu OR NOT a >= b)", [
        "eu is read as a property name (region <> eu compares two properties); quote a "
        "string: region <> 'eu'",
        "b is read as a property name (a >= b compares two properties); quote a string: "
        "a >= 'b'"]),
    ("region = 'eu'", []),
    ("region IS NULL OR n IN (1, 2)", []),
    ("TAG = gold", []),  # TAG is no property
])
def test_a_comparison_of_two_properties_is_noted_not_refused(where, notes):
    assert compile_filter(None, where).notes() == notes


def test_a_bare_word_compares_with_the_property_of_that_name():
    bare = compile_filter(None, "region = eu")
    assert not bare.matches(None, {"region": "eu"})  # no property eu: NULL, so UNKNOWN
    assert bare.matches(None, {"region": "x", "eu": "x"})


def test_no_filter_has_no_notes():
    assert compile_filter().notes() == [] and compile_filter("a || b").notes() == []
