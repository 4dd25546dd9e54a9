"""Deterministic fuzzed Kafka messages, each with its expected fate.

``fuzz_cases(seed)`` returns malformed (and malformed-looking) messages made
by a seeded RNG: raw bytes, invalid / overlong UTF-8, truncated JSON, NaN and
Infinity tokens, numbers beyond the double range, huge integers, deep
nesting, wrong JSON types for every field kind, missing fields, non-object
JSON, duplicate keys, BOM, NUL bytes, lone surrogates, unknown categories,
booleans as numbers, large messages, tombstones, binary keys and headers.

Every case states what must become of it, *independently* of the pipeline:
``reasons`` is the set of acceptable dead-letter reasons, or empty when the
message is in fact a valid record (JSON's last duplicate key wins, a public
field takes any JSON value, an integer field clamps a huge integer, ...).
Tests compare this expectation with the offline oracle
(``worker_proc.replay_expected``) and with what the worker really did.

Raw personal-looking values carry ``CANARY`` so tests can check that no raw
value leaks into logs or dead-letter details.
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

#: the config body of the fuzz worker: one field of every parsing kind
PRIVACY: dict[str, object] = {
    "privacy": {"epsilon": 4.5, "delta": 1.0e-5},
    "fields": [
        {"name": "device_id", "kind": "drop"},
        {"name": "seq", "kind": "public"},
        {
            "name": "salary",
            "kind": "real",
            "mechanism": "laplace",
            "bounds": [0, 1000],
            "epsilon": 1.0,
        },
        {"name": "visits", "kind": "integer", "bounds": [0, 100], "epsilon": 0.5},
        {"name": "state", "kind": "categorical", "domain": ["TX", "CA", "NY"], "epsilon": 0.5},
        {"name": "level", "kind": "categorical", "domain": [1, 2, 3], "epsilon": 0.5},
        {"name": "opted_in", "kind": "boolean", "epsilon": 0.5, "delta": 1.0e-6},
        {
            "name": "tags",
            "kind": "set",
            "universe": ["a", "b", "c", "d"],
            "max_items": 2,
            "epsilon": 0.5,
        },
        {"name": "city", "kind": "categorical", "mechanism": "local_hashing", "epsilon": 0.5},
        {
            "name": "vec",
            "kind": "vector",
            "dimension": 3,
            "l2_bound": 10.0,
            "epsilon": 0.5,
            "delta": 1.0e-6,
        },
    ],
}

#: every released field (the drop field ``device_id`` is never parsed)
RELEASED = ("seq", "salary", "visits", "state", "level", "opted_in", "tags", "city", "vec")
#: the fields whose absence dead-letters a record
REQUIRED = RELEASED

#: the worker's kafka.max_message_bytes in the fuzz test: what the producer may send
MAX_MESSAGE_BYTES = 700_000

#: every reason the worker may give (``privstream.pipeline``, ``privstream.worker.produce``)
KNOWN_REASONS = frozenset(
    {
        "output_too_large",
        "internal_error",
        "invalid_utf8",
        "invalid_json",
        "not_finite",
        "not_object",
        "missing_field",
        "wrong_type",
        "wrong_shape",
        "unknown_category",
        "too_many_items",
        "nested_public",
        "missing_key",
        "undecodable_header",
    }
)

STATES = ("TX", "CA", "NY")
LEVELS = (1, 2, 3)
UNIVERSE = ("a", "b", "c", "d")
CITIES = ("Austin", "Ljubljana", "Zürich", "東京", "São Paulo", "🙂 town", "a\u0301b")

CANARY = "CANARY"


@dataclass(frozen=True)
class Case:
    """One message and its expected fate."""

    kind: str
    value: bytes | None
    reasons: frozenset[str]  # empty: a valid record that must be sanitized
    key: bytes | None = None
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    #: the raw value is too large to be copied into the dead letter (above MAX_MESSAGE_BYTES)
    raw_too_large: bool = False

    @property
    def good(self) -> bool:
        return not self.reasons

    @property
    def sanitizable(self) -> bool:
        """What the pure pipeline says: a valid record (even if its output is then too large)."""
        return self.good or self.reasons == {"output_too_large"}


def canary(tag: str, i: int) -> str:
    return f"{CANARY}-{tag}-{i:06d}"


# --- JSON text built by hand, so that tokens json.dumps never writes can be injected


Pairs = list[tuple[str, str]]


def obj_text(pairs: Pairs) -> str:
    """A JSON object from (key, raw JSON text of the value) pairs, duplicates kept."""
    return "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in pairs) + "}"


def good_pairs(rng: random.Random, seq: int, i: int) -> Pairs:
    """A valid record (ASCII only): every field in its domain, or clamped into it."""
    return [
        ("device_id", json.dumps(canary("DEV", i))),
        ("seq", str(seq)),
        ("salary", repr(round(rng.uniform(-100.0, 1100.0), 6))),  # out of bounds is clamped
        ("visits", str(rng.randint(-5, 120))),
        ("state", json.dumps(rng.choice(STATES))),
        ("level", str(rng.choice(LEVELS))),
        ("opted_in", rng.choice(("true", "false"))),
        ("tags", json.dumps(rng.sample(UNIVERSE, rng.randint(0, 2)))),
        ("city", json.dumps(rng.choice(CITIES))),
        ("vec", json.dumps([round(rng.uniform(-20.0, 20.0), 4) for _ in range(3)])),
    ]


def good_value(rng: random.Random, seq: int, i: int) -> bytes:
    return obj_text(good_pairs(rng, seq, i)).encode()


def with_field(pairs: Pairs, name: str, text: str) -> Pairs:
    return [(k, text if k == name else v) for k, v in pairs]


def without(pairs: Pairs, name: str) -> Pairs:
    return [(k, v) for k, v in pairs if k != name]


# --- per-field wrong values: (raw JSON text, expected reasons or empty for valid)

BAD = frozenset
OK: frozenset[str] = frozenset()
WT, UC, NF = BAD({"wrong_type"}), BAD({"unknown_category"}), BAD({"not_finite"})
NP = BAD({"nested_public"})  # a public field takes scalars only (no allow_nested)

HUGE_INT = str(10**400)  # beyond the double range, within Python's int-from-str limit
#: JSON values of every type, each with what every field makes of it
FIELD_VALUES: list[tuple[str, dict[str, frozenset[str]]]] = [
    # (raw JSON text, {released field: expected reasons, empty = valid})
    ('"high"', {"salary": WT, "visits": WT, "state": UC, "level": UC, "opted_in": WT,
                "tags": WT, "city": OK, "vec": WT, "seq": OK}),
    ('"1"', {"salary": WT, "visits": WT, "state": UC, "level": UC, "opted_in": WT,
             "tags": WT, "city": OK, "vec": WT, "seq": OK}),
    ("true", {"salary": WT, "visits": WT, "state": WT, "level": WT, "opted_in": OK,
              "tags": WT, "city": WT, "vec": WT, "seq": OK}),
    ("1", {"salary": OK, "visits": OK, "state": UC, "level": OK, "opted_in": WT,
           "tags": WT, "city": WT, "vec": WT, "seq": OK}),
    ("0", {"salary": OK, "visits": OK, "state": UC, "level": UC, "opted_in": WT,
           "tags": WT, "city": WT, "vec": WT, "seq": OK}),
    ("1.5", {"salary": OK, "visits": OK, "state": WT, "level": WT, "opted_in": WT,
             "tags": WT, "city": WT, "vec": WT, "seq": OK}),
    ("2.0", {"salary": OK, "visits": OK, "state": WT, "level": WT, "opted_in": WT,
             "tags": WT, "city": WT, "vec": WT, "seq": OK}),
    ("-0", {"salary": OK, "visits": OK, "state": UC, "level": UC, "opted_in": WT,
            "tags": WT, "city": WT, "vec": WT, "seq": OK}),
    ("1e-400", {"salary": OK, "visits": OK, "state": WT, "level": WT, "opted_in": WT,
                "tags": WT, "city": WT, "vec": WT, "seq": OK}),
    ("1e308", {"salary": OK, "visits": OK, "state": WT, "level": WT, "opted_in": WT,
               "tags": WT, "city": WT, "vec": WT, "seq": OK}),
    ("-1.7976931348623157e308", {"salary": OK, "visits": OK, "state": WT, "level": WT,
                                 "opted_in": WT, "tags": WT, "city": WT, "vec": WT,
                                 "seq": OK}),
    (HUGE_INT, {"salary": OK, "visits": OK, "state": UC, "level": UC, "opted_in": WT,
                "tags": WT, "city": WT, "vec": WT, "seq": OK}),
    ("-" + HUGE_INT, {"salary": OK, "visits": OK, "state": UC, "level": UC, "opted_in": WT,
                      "tags": WT, "city": WT, "vec": WT, "seq": OK}),
    # beyond the double range: a noised number clamps it like any out-of-range value (whether a
    # record is released never depends on its value); a public field cannot copy it
    *[(big, {"salary": OK, "visits": OK, "state": WT, "level": WT, "opted_in": WT,
             "tags": WT, "city": WT, "vec": WT, "seq": NF})
      for big in ("1e999", "-1e999", "1E400", "123456789e305")],
    ("[1,1e999,3]", {"salary": WT, "visits": WT, "state": WT, "level": WT, "opted_in": WT,
                     "tags": WT, "city": WT, "vec": OK, "seq": NP}),  # clipped onto the ball
    ("null", {"salary": WT, "visits": WT, "state": WT, "level": WT, "opted_in": WT,
              "tags": WT, "city": WT, "vec": WT, "seq": OK}),
    ("[]", {"salary": WT, "visits": WT, "state": WT, "level": WT, "opted_in": WT,
            "tags": OK, "city": WT, "vec": BAD({"wrong_shape"}), "seq": NP}),
    ("{}", {"salary": WT, "visits": WT, "state": WT, "level": WT, "opted_in": WT,
            "tags": WT, "city": WT, "vec": WT, "seq": NP}),
    ('{"TX": 1}', {"salary": WT, "visits": WT, "state": WT, "level": WT, "opted_in": WT,
                   "tags": WT, "city": WT, "vec": WT, "seq": NP}),
    ('["TX"]', {"salary": WT, "visits": WT, "state": WT, "level": WT, "opted_in": WT,
                "tags": UC, "city": WT, "vec": BAD({"wrong_shape"}), "seq": NP}),
    # a lone surrogate is a string like any other: unknown in a domain, hashed by local hashing
    ('"\\ud800"', {"salary": WT, "visits": WT, "state": UC, "level": UC, "opted_in": WT,
                   "tags": WT, "city": OK, "vec": WT, "seq": OK}),
    ('"x\\udfffy"', {"salary": WT, "visits": WT, "state": UC, "level": UC, "opted_in": WT,
                     "tags": WT, "city": OK, "vec": WT, "seq": OK}),
    ('"T\\u0058"', {"salary": WT, "visits": WT, "state": OK, "level": UC, "opted_in": WT,
                    "tags": WT, "city": OK, "vec": WT, "seq": OK}),  # escaped "TX"
    ('"TX\\u0000"', {"salary": WT, "visits": WT, "state": UC, "level": UC, "opted_in": WT,
                     "tags": WT, "city": OK, "vec": WT, "seq": OK}),
    ('"tx"', {"salary": WT, "visits": WT, "state": UC, "level": UC, "opted_in": WT,
              "tags": WT, "city": OK, "vec": WT, "seq": OK}),
    ('" TX"', {"salary": WT, "visits": WT, "state": UC, "level": UC, "opted_in": WT,
               "tags": WT, "city": OK, "vec": WT, "seq": OK}),
    ('["a","a","b"]', {"salary": WT, "visits": WT, "state": WT, "level": WT,
                       "opted_in": WT, "tags": OK, "city": WT, "vec": WT, "seq": NP}),
    ('["a","b","c"]', {"salary": WT, "visits": WT, "state": WT, "level": WT,
                       "opted_in": WT, "tags": BAD({"too_many_items"}), "city": WT,
                       "vec": WT, "seq": NP}),  # three items, but strings: wrong type in a vector
    ('["a",1]', {"salary": WT, "visits": WT, "state": WT, "level": WT, "opted_in": WT,
                 "tags": WT, "city": WT, "vec": BAD({"wrong_shape"}), "seq": NP}),
    ("[1,2]", {"salary": WT, "visits": WT, "state": WT, "level": WT, "opted_in": WT,
               "tags": WT, "city": WT, "vec": BAD({"wrong_shape"}), "seq": NP}),
    ("[1,2,3,4]", {"salary": WT, "visits": WT, "state": WT, "level": WT, "opted_in": WT,
                   "tags": WT, "city": WT, "vec": BAD({"wrong_shape"}), "seq": NP}),
    ("[1,true,3]", {"salary": WT, "visits": WT, "state": WT, "level": WT, "opted_in": WT,
                    "tags": WT, "city": WT, "vec": WT, "seq": NP}),
    ("[1,null,3]", {"salary": WT, "visits": WT, "state": WT, "level": WT, "opted_in": WT,
                    "tags": WT, "city": WT, "vec": WT, "seq": NP}),
    ("[1e308,-1e308,1e308]", {"salary": WT, "visits": WT, "state": WT, "level": WT,
                              "opted_in": WT, "tags": WT, "city": WT, "vec": OK,
                              "seq": NP}),  # clipped into the L2 ball, norm overflow-safe
    ("[5e-324,0,-0.0]", {"salary": WT, "visits": WT, "state": WT, "level": WT,
                         "opted_in": WT, "tags": WT, "city": WT, "vec": OK, "seq": NP}),
    # an integer of more digits than Python converts (4300): never converted, its sign decides
    # (pipeline.long_integers): clamped where noised, unknown in a domain, not copied when public
    *[(long, {"salary": OK, "visits": OK, "state": UC, "level": UC, "opted_in": WT,
              "tags": WT, "city": WT, "vec": WT, "seq": NF})
      for long in ("9" * 5000, "-" + "9" * 4301, "1" + "0" * 10_000)],
    (f"[1,{'9' * 5000},3]", {"salary": WT, "visits": WT, "state": WT, "level": WT,
                             "opted_in": WT, "tags": WT, "city": WT, "vec": OK, "seq": NP}),
    (f"[1,{HUGE_INT},3]", {"salary": WT, "visits": WT, "state": WT, "level": WT,
                           "opted_in": WT, "tags": WT, "city": WT, "vec": OK, "seq": NP}),
    ("[[[[[[[[[[1]]]]]]]]]]", {"salary": WT, "visits": WT, "state": WT, "level": WT,
                               "opted_in": WT, "tags": WT, "city": WT,
                               "vec": BAD({"wrong_shape"}), "seq": NP}),
]  # fmt: skip

#: tokens that are not JSON anywhere in a record, even in a dropped or unknown field
ANYWHERE_INVALID: list[tuple[str, frozenset[str]]] = [
    ("NaN", BAD({"invalid_json"})),
    ("-NaN", BAD({"invalid_json"})),
    ("Infinity", BAD({"invalid_json"})),
    ("-Infinity", BAD({"invalid_json"})),
    ("nan", BAD({"invalid_json"})),
    ("inf", BAD({"invalid_json"})),
    ("01", BAD({"invalid_json"})),
    ("+1", BAD({"invalid_json"})),
    (".5", BAD({"invalid_json"})),
    ("1.", BAD({"invalid_json"})),
    ("0x10", BAD({"invalid_json"})),
    ("'TX'", BAD({"invalid_json"})),
    ("True", BAD({"invalid_json"})),
    ("undefined", BAD({"invalid_json"})),
    ('"unterminated', BAD({"invalid_json"})),
    ('"bad \\x escape"', BAD({"invalid_json"})),
    ('"\\u12"', BAD({"invalid_json"})),
    ('"tab\tinside"', BAD({"invalid_json"})),  # raw control character in a string
    ("[1,]", BAD({"invalid_json"})),
    ("{,}", BAD({"invalid_json"})),
]


Maker = Callable[[random.Random, int], Case]


def _raw_bytes(rng: random.Random, i: int) -> Case:
    body = bytearray(rng.randbytes(rng.randint(0, 300)))
    body.insert(rng.randint(0, len(body)), 0xFF)  # 0xFF never occurs in UTF-8
    return Case("random_bytes", bytes(body), BAD({"invalid_utf8"}))


def _invalid_utf8_in_string(rng: random.Random, i: int) -> Case:
    bad = rng.choice(
        [
            b"\xc0\xaf",  # overlong "/"
            b"\xe0\x80\xaf",  # overlong, 3 bytes
            b"\xf0\x80\x80\xaf",  # overlong, 4 bytes
            b"\xc1\xbf",  # overlong
            b"\xed\xa0\x80",  # UTF-8-encoded surrogate U+D800
            b"\xed\xbf\xbf",  # U+DFFF
            b"\xf4\x90\x80\x80",  # beyond U+10FFFF
            b"\xe9",  # Latin-1 e-acute
            b"\x80",  # lone continuation byte
            b"\xc3",  # truncated 2-byte sequence
            b"\xfe\xfe",
        ]
    )
    name = rng.choice(["state", "city", "device_id", "seq"])
    pairs = good_pairs(rng, 1_000_000 + i, i)
    text = obj_text(with_field(pairs, name, '"@@"')).encode()
    return Case(
        "invalid_utf8", text.replace(b"@@", canary("U", i).encode() + bad), BAD({"invalid_utf8"})
    )


def _utf8_truncated_at_end(rng: random.Random, i: int) -> Case:
    text = good_value(rng, 1_000_000 + i, i)
    return Case(
        "utf8_cut", text[: rng.randint(1, len(text) - 1)] + b"\xe6\x9d", BAD({"invalid_utf8"})
    )


def _truncated_json(rng: random.Random, i: int) -> Case:
    text = good_value(rng, 1_000_000 + i, i)  # ASCII only: every proper prefix is bad JSON
    return Case("truncated_json", text[: rng.randint(0, len(text) - 1)], BAD({"invalid_json"}))


def _garbage_text(rng: random.Random, i: int) -> Case:
    tail = "".join(
        rng.choices(string.ascii_letters + string.punctuation + " ", k=rng.randint(0, 80))
    )
    first = rng.choice(string.ascii_letters)  # never a quote or a brace: never JSON
    return Case("garbage_text", ("{" + first + tail).encode(), BAD({"invalid_json"}))


def _invalid_token(rng: random.Random, i: int) -> Case:
    token, reasons = rng.choice(ANYWHERE_INVALID)
    name = rng.choice([*RELEASED, "device_id", "unknown_extra"])
    pairs = good_pairs(rng, 1_000_000 + i, i)
    if name == "unknown_extra":
        pairs.append((name, token))
    else:
        pairs = with_field(pairs, name, token)
    return Case(f"token:{token[:12]}", obj_text(pairs).encode(), reasons)


def _wrong_value(rng: random.Random, i: int) -> Case:
    text, outcome = rng.choice(FIELD_VALUES)
    name = rng.choice(RELEASED)
    pairs = good_pairs(rng, 1_000_000 + i, i)
    return Case(f"value:{name}", obj_text(with_field(pairs, name, text)).encode(), outcome[name])


def _missing_field(rng: random.Random, i: int) -> Case:
    pairs = good_pairs(rng, 1_000_000 + i, i)
    for name in rng.sample(REQUIRED, rng.randint(1, len(REQUIRED))):
        pairs = without(pairs, name)
    return Case("missing_field", obj_text(pairs).encode(), BAD({"missing_field"}))


def _renamed_field(rng: random.Random, i: int) -> Case:
    name = rng.choice(REQUIRED)
    pairs = good_pairs(rng, 1_000_000 + i, i)
    renamed = rng.choice([name.upper(), name + " ", " " + name, name.capitalize() + "_"])
    pairs = [(renamed if k == name else k, v) for k, v in pairs]
    return Case("renamed_field", obj_text(pairs).encode(), BAD({"missing_field"}))


def _not_object(rng: random.Random, i: int) -> Case:
    good = good_value(rng, 1_000_000 + i, i).decode()
    text = rng.choice(
        ["[]", "[1,2]", "1", "-0.5", '"str"', "null", "true", "false", f"[{good}]",
         json.dumps(good), f' \n\t{rng.randint(0, 10**6)}\r\n', '"\\ud800"']
    )  # fmt: skip
    return Case("not_object", text.encode(), BAD({"not_object"}))


def _duplicate_keys(rng: random.Random, i: int) -> Case:
    pairs = good_pairs(rng, 1_000_000 + i, i)
    name = rng.choice(["state", "opted_in", "level"])
    wrong = {"state": '"WA"', "opted_in": "1", "level": '"2"'}[name]
    reason = {"state": UC, "opted_in": WT, "level": UC}[name]
    right = dict(pairs)[name]
    if rng.random() < 0.5:  # the last key wins: a valid record
        return Case(
            "dup_key_last_good",
            obj_text([*with_field(pairs, name, wrong), (name, right)]).encode(),
            OK,
        )
    return Case("dup_key_last_bad", obj_text([*pairs, (name, wrong)]).encode(), reason)


def _framing(rng: random.Random, i: int) -> Case:
    good = good_value(rng, 1_000_000 + i, i)
    framed, reasons = rng.choice(
        [
            (b"\xef\xbb\xbf" + good, BAD({"invalid_json"})),  # BOM
            (b"\x00" + good, BAD({"invalid_json"})),
            (good + b"\x00", BAD({"invalid_json"})),
            (good.replace(b'"seq"', b'"s\x00eq"', 1), BAD({"invalid_json"})),  # raw NUL in a key
            (good + good, BAD({"invalid_json"})),  # two objects
            (good + b"\n" + good, BAD({"invalid_json"})),
            (good + b",", BAD({"invalid_json"})),
            (good[:-1] + b",}", BAD({"invalid_json"})),  # trailing comma
            (good + b" // comment", BAD({"invalid_json"})),
            (b"/* c */" + good, BAD({"invalid_json"})),
            (good.replace(b'"', b"'"), BAD({"invalid_json"})),
            (b" \r\n\t" + good + b"\n\n ", OK),  # JSON whitespace around an object is fine
            (good.replace(b",", b" , \n", 3), OK),
            (b"", BAD({"invalid_json"})),
            (b" \t\n", BAD({"invalid_json"})),
            (b"\x00", BAD({"invalid_json"})),
            (b"\xef\xbb\xbf", BAD({"invalid_json"})),
        ]
    )
    return Case("framing", framed, reasons)


def _unknown_category(rng: random.Random, i: int) -> Case:
    pairs = good_pairs(rng, 1_000_000 + i, i)
    name, text = rng.choice(
        [
            ("state", json.dumps(canary("ST", i))),
            ("state", '"WA"'),
            ("state", '""'),
            ("level", "4"),
            ("level", "-1"),
            ("level", '"one"'),
            ("tags", json.dumps(["a", canary("TAG", i)])),
        ]
    )
    return Case("unknown_category", obj_text(with_field(pairs, name, text)).encode(), UC)


def _bool_as_number(rng: random.Random, i: int) -> Case:
    pairs = good_pairs(rng, 1_000_000 + i, i)
    text = rng.choice(["0", "1", '"true"', '"false"', "0.0", "[true]", '"yes"'])
    return Case("bool_as_number", obj_text(with_field(pairs, "opted_in", text)).encode(), WT)


def _valid_oddities(rng: random.Random, i: int) -> Case:
    """Strange but valid records: each must be sanitized, not dead-lettered."""
    pairs = good_pairs(rng, 1_000_000 + i, i)
    choice = rng.randrange(7)
    if choice == 0:  # unknown extra fields, escaped keys, a surrogate key: all dropped
        pairs = [*pairs, ("\ud800", "1"), ("internal", json.dumps(canary("X", i))), ("", "null")]
    elif choice == 1:  # the dropped field holds anything valid
        pairs = with_field(
            pairs, "device_id", rng.choice(["null", "[[[]]]", '{"a":{"b":[1e300]}}'])
        )
    elif choice == 2:  # keys in another order
        rng.shuffle(pairs)
    elif choice == 3:  # a public field takes any JSON scalar
        text = rng.choice(['"\\ud800"', "true", '""', "null", "-0.0", "1e-320"])
        pairs = with_field(pairs, "seq", text)
    elif choice == 4:  # "TX" written with \\u escapes decodes to "TX"
        pairs = [
            (k, json.dumps(json.loads(v), ensure_ascii=True).replace('"TX"', '"\\u0054\\u0058"'))
            for k, v in pairs
        ]
    elif choice == 5:  # non-ASCII strings where strings are free
        pairs = with_field(
            pairs,
            "city",
            json.dumps("".join(rng.choices("äöü東京🙂\u0301\u200b", k=9)), ensure_ascii=False),
        )
    else:  # integer fields given whole floats, out-of-range values clamped
        pairs = with_field(
            pairs, "visits", rng.choice(["3.0", "-1e300", "1e300", "100000000000000000000"])
        )
        pairs = with_field(pairs, "salary", rng.choice(["-1e308", "1e308", "5e-324", "0"]))
    return Case("valid_oddity", obj_text(pairs).encode(), OK)


MAKERS: tuple[Maker, ...] = (
    _raw_bytes,
    _invalid_utf8_in_string,
    _utf8_truncated_at_end,
    _truncated_json,
    _garbage_text,
    _invalid_token,
    _wrong_value,
    _wrong_value,  # the richest class: twice as often
    _missing_field,
    _renamed_field,
    _not_object,
    _duplicate_keys,
    _framing,
    _unknown_category,
    _bool_as_number,
    _valid_oddities,
)


def _one_offs(rng: random.Random) -> list[Case]:
    """Expensive cases, each made once: deep nesting and large messages."""

    def record(n: int, extra: Sequence[tuple[str, str]] = (), **fields: str) -> bytes:
        pairs = good_pairs(rng, 2_000_000 + n, n)
        for name, text in fields.items():
            pairs = with_field(pairs, name, text)
        return obj_text([*pairs, *extra]).encode()

    invalid = BAD({"invalid_json"})
    out: list[Case] = []
    for depth in (2_000, 100_000):  # beyond the decoder's recursion limit
        nested = "[" * depth + "]" * depth
        deep_obj = '{"a":' * depth + "1" + "}" * depth
        out.append(Case(f"deep_array_{depth}", record(0, device_id=nested), invalid))
        out.append(Case(f"deep_object_{depth}", record(1, seq=deep_obj), invalid))
        out.append(Case(f"deep_bare_{depth}", nested.encode(), invalid))
    # shallow nesting is fine where any value is allowed (dropped); public takes scalars only
    shallow = "[" * 200 + "]" * 200
    out.append(Case("nested_public_200", record(2, seq=shallow), NP))
    email = '{"t": 1, "email": "CANARY-alice@example.com"}'
    out.append(Case("nested_public_object", record(2, seq=email), NP))
    out.append(Case("nested_dropped_200", record(3, device_id=shallow), OK))
    out.append(Case("nested_salary_200", record(4, salary=shallow), WT))
    # ~500 KB messages (below the broker's 1 MB and the worker's 700 KB message limits)
    pad = [("padding", json.dumps(canary("PAD", 0) + "x" * 500_000))]
    out.append(Case("large_good_extra_field", record(5, pad), OK))
    out.append(Case("large_bad_category", record(6, pad, state='"WA"'), UC))
    out.append(Case("large_public_string", record(7, seq=json.dumps("y" * 500_000)), OK))
    out.append(Case("large_truncated", record(8, pad)[:-2], invalid))
    out.append(Case("large_random_bytes", rng.randbytes(500_000) + b"\xff", BAD({"invalid_utf8"})))
    many_keys = [(f"k{j}", str(j)) for j in range(20_000)]
    out.append(Case("many_unknown_keys", record(9, many_keys), OK))
    out.append(Case("huge_array_in_tags", record(10, tags=json.dumps(["a"] * 50_000)), OK))
    out.append(
        Case("huge_vector", record(11, vec=json.dumps([1.0] * 50_000)), BAD({"wrong_shape"}))
    )
    # valid, but the sanitized record outgrows the limit: each "\u00e9" is 6 bytes out, 2 in
    wide = json.dumps("\u00e9" * 150_000, ensure_ascii=False)
    out.append(Case("output_too_large", record(12, seq=wide), BAD({"output_too_large"})))
    # bad, and too large to be copied into a dead letter
    big = b"\xff" + canary("BIG", 0).encode() + rng.randbytes(MAX_MESSAGE_BYTES)
    out.append(Case("raw_too_large", big, BAD({"invalid_utf8"}), raw_too_large=True))
    # a tombstone (no value at all): nothing to sanitize
    out.append(Case("tombstone", None, invalid))
    return out


def _random_key(rng: random.Random, i: int) -> bytes | None:
    return rng.choice([None, canary("KEY", i).encode(), rng.randbytes(rng.randint(0, 40)), b""])


def _random_headers(rng: random.Random, i: int) -> list[tuple[str, bytes]]:
    headers = [(f"h{j}", rng.randbytes(rng.randint(0, 20))) for j in range(rng.randint(0, 2))]
    if rng.random() < 0.5:
        headers.append(("trace", canary("HDR", i).encode()))
    if rng.random() < 0.1:  # a forged reason header: the real one must still be added
        headers.append(("privstream-reason", b"forged"))
    return headers


def fuzz_cases(bad: int = 10_000, seed: int = 20240601) -> list[Case]:
    """Fuzzed messages until ``bad`` of them are expected dead letters (the valid-looking
    ones come on top), the one-off cases included, each with a random key and headers."""
    rng = random.Random(seed)
    cases = _one_offs(rng)
    i, dead = len(cases), sum(not c.good for c in cases)
    while dead < bad:
        case = MAKERS[i % len(MAKERS)](rng, i)
        cases.append(case)
        dead += not case.good
        i += 1
    keyed = [(c, _random_key(rng, n), _random_headers(rng, n)) for n, c in enumerate(cases)]
    return [
        # Kafka needs a key or a value: a tombstone always gets a key
        Case(c.kind, c.value, c.reasons, key if c.value is not None or key else b"", headers,
             c.raw_too_large)
        for c, key, headers in keyed
    ]  # fmt: skip


def good_cases(count: int, seed: int = 7) -> list[Case]:
    """Plain valid records with ``seq`` 0..count-1 (fuzzed ones use seq >= 1,000,000)."""
    rng = random.Random(seed)
    return [
        Case("good", good_value(rng, seq, seq), OK, canary("KEY", seq).encode(), [("trace", b"t")])
        for seq in range(count)
    ]


def interleave(good: list[Case], fuzzed: list[Case], seed: int = 11) -> list[Case]:
    """One deterministic shuffle of both lists."""
    merged = [*good, *fuzzed]
    random.Random(seed).shuffle(merged)
    return merged
