"""Red team of the start-up changes: the stand-in pydantic plugin loader and the lazy imports.

The stand-in loader (``privstream.cli.main._no_pydantic_plugins``) must stay in
privstream's own process: a program importing privstream as a library keeps
pydantic's loader and its environment. Config errors must exit 2 with the same
messages either way, and what is imported late (estimators, audits, canaries, the
structured kinds' handlers) must change no calibration and no released byte.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.cli.test_startup import CONFIG

#: every kind and mechanism sanitize can release, unary encoding and the structured ones
#: (whose handlers are imported late) included
WIDE = """\
kafka: {input_topic: raw, output_topic: clean, dead_letter_topic: dlq}
privacy: {epsilon: 40, delta: 1.0e-5}
fields:
  - {name: id, kind: drop}
  - {name: pub, kind: public, allow_nested: true}
  - {name: x, kind: real, bounds: [-5, 5], mechanism: laplace, epsilon: 1}
  - {name: g, kind: real, bounds: [0, 10], mechanism: gaussian, epsilon: 1, delta: 1.0e-6}
  - {name: n, kind: integer, bounds: [0, 10], epsilon: 1}
  - {name: s, kind: categorical, domain: [a, b, c], epsilon: 1}
  - {name: u, kind: categorical, domain: [a, b, c], mechanism: unary_encoding, epsilon: 1}
  - {name: h, kind: categorical, mechanism: local_hashing, epsilon: 1}
  - {name: b, kind: boolean, epsilon: 1}
  - {name: t, kind: set, universe: [p, q, r], max_items: 2, epsilon: 1}
  - {name: v, kind: vector, dimension: 2, l2_bound: 1, epsilon: 1, delta: 1.0e-6}
"""

RELEASE = """
import hashlib, json, sys
if sys.argv[1] == "eager":  # everything the lazy imports defer, imported first
    import privstream.audit, privstream.estimate, privstream.audit.by_kind
    import privstream.estimate.by_kind
    import privstream.pipeline.structured
from privstream.config import load_config
from privstream.kinds import build_plan
from privstream.pipeline.batch import process_batch, process_block
from privstream.testing import SeededSource
plan = build_plan(load_config(sys.argv[2]))
records = [
    {"id": i, "pub": [i, {"k": -0.0}], "x": i * 0.37 - 3, "g": 2**53 + i, "n": i - 2,
     "s": "abc"[i % 3], "u": "abc"[i % 2], "h": f"city{i}", "b": i % 2 == 0,
     "t": ["p", "r"][: i % 3], "v": [0.25 * i, -1e308]}
    for i in range(60)
]
messages = [json.dumps(r).encode() for r in records] + [b"[]", b'{"x": true}']
apart = process_batch(plan, messages, SeededSource(11))
block = process_block(plan, messages, SeededSource(11))
print(json.dumps({
    "mechanisms": [repr(f.handler.mechanism) for f in plan.fields],
    "outputs": hashlib.sha256(b"".join(o + b"\\n" for o in apart.outputs)).hexdigest(),
    "block": hashlib.sha256(block.joined).hexdigest(),
    "count": len(apart.outputs),
    "dead": [(d.index, d.reason) for d in apart.dead_letters],
    "estimators": "privstream.estimate.by_kind" in sys.modules,
}))
"""


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, check=check)


def test_lazy_imports_change_no_calibration_and_no_released_byte(tmp_path: Path) -> None:
    """The same seeded batch released with the deferred modules imported first and not."""
    config = tmp_path / "wide.yaml"
    config.write_text(WIDE)
    lazy = json.loads(_run("-c", RELEASE, "lazy", str(config)).stdout)
    eager = json.loads(_run("-c", RELEASE, "eager", str(config)).stdout)
    assert (lazy.pop("estimators"), eager.pop("estimators")) == (False, True)  # not vacuous
    assert lazy == eager
    assert lazy["count"] == 60
    assert lazy["outputs"] == lazy["block"]
    assert [d[0] for d in lazy["dead"]] == [60, 61]


LIBRARY = """
import json, os, sys
import privstream
from privstream.config import load_config
from privstream.kinds import build_plan
from privstream.pipeline.batch import process_block
from privstream.testing import SeededSource
plan = build_plan(load_config(sys.argv[1]))
process_block(plan, [b'{"ts": 1}'], SeededSource(1))
import pydantic.plugin._loader as loader
print(json.dumps({
    "file": loader.__file__,
    "own": loader.get_plugins.__module__,
    "env": sorted(k for k in os.environ if k.startswith("PYDANTIC")),
}))
"""


def test_a_library_import_keeps_pydantics_plugin_loader(tmp_path: Path) -> None:
    """Config, plan and a release from a program's own code: pydantic's loader is its
    own module, and privstream put nothing in the environment."""
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    seen = json.loads(_run("-c", LIBRARY, str(config)).stdout)
    assert seen["file"] is not None and seen["file"].endswith("_loader.py")
    assert seen["own"] == "pydantic.plugin._loader"
    assert seen["env"] == []


#: (what is wrong, the config's replacement for CONFIG's epsilon line)
BAD = [
    ("negative epsilon", "privacy: {epsilon: -6}"),
    ("unknown key", "privacy: {epsilon: 6, epsilonn: 1}"),
    ("not yaml", "privacy: {epsilon: [6}"),
    ("epsilon a string", "privacy: {epsilon: six}"),
]

AS_LIBRARY = "import sys; from privstream.cli.main import main; sys.exit(main(sys.argv[1:]))"


@pytest.mark.parametrize(("wrong", "line"), BAD, ids=[w for w, _ in BAD])
def test_config_errors_exit_2_with_the_same_message_either_way(
    tmp_path: Path, wrong: str, line: str
) -> None:
    """``python -m privstream`` (the stand-in loader) and ``main(argv)`` (pydantic's own)."""
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.replace("privacy: {epsilon: 6}", line))
    args = ["explain", "--config", str(config)]
    own = _run("-m", "privstream", *args, check=False)
    library = _run("-c", AS_LIBRARY, *args, check=False)
    assert own.returncode == library.returncode == 2, (wrong, own.stderr)
    assert own.stderr == library.stderr
    assert "epsilon" in own.stderr or "yaml" in own.stderr.lower(), own.stderr


def test_explain_is_the_same_calibration_either_way(tmp_path: Path) -> None:
    config = tmp_path / "wide.yaml"
    config.write_text(WIDE)
    args = ["explain", "--config", str(config), "--format", "json"]
    own = _run("-m", "privstream", *args)
    library = _run("-c", AS_LIBRARY, *args)
    assert own.stdout == library.stdout
    assert json.loads(own.stdout)  # not vacuous
