"""Every code block in the README and docs/ is checked here, and the generated pages are current.

YAML blocks parse and validate as configs (fragments are completed with a minimal
``kafka``/``privacy`` section); JSON blocks parse (one document or JSON Lines); shell
blocks name real subcommands, options and make targets; each text block has a
checker of its own, registered by its first line, so a new block without one fails.
The worked examples are re-run: the documented output must have the shape of a fresh
run's (never the same noisy values), and deterministic lines must match exactly.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from privstream.cli.main import _parser, main
from privstream.config import docs_reference, parse_config
from privstream.kinds import build_plan

from tests.project.test_k8s_manifests import MEMORY_FORMULA

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
PAGES = sorted(DOCS.rglob("*.md"))
BASE: dict[str, Any] = {
    "kafka": {"input_topic": "raw", "output_topic": "out", "dead_letter_topic": "dlq"},
    "privacy": {"epsilon": 10.0, "delta": 1.0e-5},
}


def code_blocks(path: Path) -> list[tuple[str, str]]:
    """(language, body) of every fenced block of a Markdown file."""
    text = path.read_text(encoding="utf-8")
    return re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)


def blocks_of(lang: str) -> list[tuple[str, str]]:
    return [
        (str(path.relative_to(ROOT)), body)
        for path in [README, *PAGES]
        for language, body in code_blocks(path)
        if language == lang
    ]


def block_ids(blocks: list[tuple[str, str]]) -> list[str]:
    return [f"{name}:{body.splitlines()[0][:40]}" for name, body in blocks]


def test_every_block_has_a_checked_language() -> None:
    langs = {lang for path in [README, *PAGES] for lang, _ in code_blocks(path)}
    assert langs <= {"yaml", "json", "sh", "text"}, langs
    assert len(blocks_of("yaml")) >= 5 and len(blocks_of("sh")) >= 5


# --- YAML: configs and fragments validate -------------------------------------------------


@pytest.mark.parametrize(("name", "body"), blocks_of("yaml"), ids=block_ids(blocks_of("yaml")))
def test_yaml_block_is_a_valid_config(name: str, body: str) -> None:
    data = yaml.safe_load(body)
    assert isinstance(data, dict), name
    if "fields" not in data:  # a fragment of another section (metrics:)
        data = {
            **data,
            "fields": [{"name": "x", "kind": "integer", "bounds": [0, 1], "epsilon": 1.0}],
        }
    config = parse_config({**BASE, **data})
    plan = build_plan(config)  # every mechanism accepts its parameters
    assert plan.epsilon <= config.privacy.epsilon * (1 + 1e-9)


def test_sanitize_page_config_is_the_example_config() -> None:
    page = [b for lang, b in code_blocks(DOCS / "sanitize-a-file.md") if lang == "yaml"]
    example = yaml.safe_load((ROOT / "examples" / "telemetry.yaml").read_text())
    shown = yaml.safe_load(page[0])
    assert shown == {"privacy": example["privacy"], "fields": example["fields"]}


# --- JSON: every block parses --------------------------------------------------------------


def json_documents(body: str) -> list[Any]:
    try:
        return [json.loads(body)]
    except json.JSONDecodeError:  # JSON Lines
        return [json.loads(line) for line in body.splitlines() if line.strip()]


@pytest.mark.parametrize(("name", "body"), blocks_of("json"), ids=block_ids(blocks_of("json")))
def test_json_block_parses(name: str, body: str) -> None:
    documents = json_documents(body)
    assert documents and all(isinstance(d, dict) for d in documents), name


# --- shell: real subcommands, options, targets ---------------------------------------------

#: programs other than privstream and make that the docs tell readers to run
EXTERNAL = {"kcat", "chmod", "kafka-topics.sh", "python3", "pip", "helm"}


def subparsers_of(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(found[0].choices) if found else {}


def subcommand_options() -> dict[str, set[str]]:
    """Each subcommand's options; those of its own subcommands too (``topics create``)."""
    return {
        name: set(sub._option_string_actions).union(
            *(set(nested._option_string_actions) for nested in subparsers_of(sub).values())
        )
        for name, sub in subparsers_of(_parser()).items()
    }


def commands(body: str) -> list[str]:
    """Shell commands of a block: comments stripped, indented lines continue the last one
    (a trailing backslash before them is dropped)."""
    out: list[str] = []
    for raw in body.splitlines():
        line = raw.split("  #", 1)[0].rstrip()
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if raw[:1].isspace() and out:
            out[-1] += " " + line.strip()
            out[-1] = out[-1].replace(" \\ ", " ")
        else:
            out.extend(part.strip() for part in line.split("&&"))
    return out


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([a-z-]+):", text, re.M))


@pytest.mark.parametrize(("name", "body"), blocks_of("sh"), ids=block_ids(blocks_of("sh")))
def test_shell_block_names_real_commands(name: str, body: str) -> None:
    options = subcommand_options()
    for command in commands(body):
        words = command.split()
        if words[0] == "make":
            assert set(words[1:]) <= make_targets(), command
        elif words[0] == "privstream":
            assert words[1] in options, command
            used = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", command))
            assert used <= options[words[1]], (command, used - options[words[1]])
            paths = [w for w in words if w.startswith(("examples/", "docs/"))]
            assert all((ROOT / p).exists() for p in paths), command
        else:  # by name: /opt/privstream/bin/pip is pip
            assert words[0].rsplit("/", 1)[-1] in EXTERNAL, command


def test_inline_commands_name_real_options() -> None:
    """`privstream X --opt ...` in prose (the Commands page's synopses) is real too."""
    options = subcommand_options()
    spans = [
        span
        for path in [README, *PAGES]
        for span in re.findall(
            r"`(privstream [^`]*)`",
            re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.S | re.M),
        )
    ]
    assert len(spans) >= 20
    for span in spans:
        words = span.split()
        assert words[1] in options, span
        used = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", span))
        assert used <= options[words[1]], (span, used - options[words[1]])
    synopses = {s.split()[1] for s in spans if s.startswith("privstream ")}
    assert synopses == set(options)  # every subcommand is documented


# --- text: each block has its own checker ---------------------------------------------------


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # config errors exit 2 from inside the loader
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def check_config_errors(body: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The two errors shown are the loader's, for the mistakes they describe."""
    salary = {"name": "salary", "kind": "real", "bounds": [4500, 1504], "epsilon": 1.0}
    reversed_bounds = {
        **BASE,
        "fields": [{"name": "a", "kind": "drop"}, {"name": "b", "kind": "public"}, salary],
    }
    over = {
        **BASE,
        "privacy": {"epsilon": 2.0},
        "fields": [{"name": n, "kind": "boolean", "epsilon": 1.25} for n in "ab"],
    }
    lines = body.strip().splitlines()
    for config, line in zip([reversed_bounds, over], lines, strict=True):
        path = tmp_path / "c.yaml"
        path.write_text(yaml.safe_dump(config))
        code, _, err = run_cli(["explain", "--config", str(path)], capsys)
        assert code == 2
        assert line in err.splitlines(), err


def tree_paths(body: str) -> list[str]:
    """Every path a layout block names: indented names sit under the line above them."""
    named: list[str] = []
    folders: dict[int, str] = {}  # indentation -> the folder last named at it
    for line in body.splitlines():
        m = re.match(r"( *)([\w./-]+(?:/|\.py))(?:\s|$)", line)
        if m is None or len(m.group(1)) > 8:  # deeper: a description's continuation
            continue
        depth = len(m.group(1))
        path = (folders.get(depth - 2, "") if depth else "") + m.group(2)
        if path.endswith("/"):
            folders[depth] = path
        named += [path, *re.findall(r";\s+(\S+/)", line)]
    return named


def check_module_tree(body: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    named = tree_paths(body)
    assert len(named) >= 10
    assert "service/privstream/mechanisms/" in named
    assert all((ROOT / p).exists() for p in named), [p for p in named if not (ROOT / p).exists()]
    cli = re.search(r"privstream (.*)", body)
    assert cli is not None
    assert set(cli.group(1).split(" | ")) == set(subcommand_options())


def check_pipeline_diagram(body: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the stages named are modules of the pipeline, the exits are the config's topics
    for module in ("decode", "encode"):
        assert module in body
    assert {"raw topic", "sanitized topic", "dead-letter topic"} <= set(
        re.findall(r"[a-z-]+ topic", body)
    )


def check_audit_formula(body: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the statistic's terms are the ones service/privstream/audit/stats.py documents
    stats = (ROOT / "service" / "privstream" / "audit" / "stats.py").read_text()
    assert "Clopper" in stats and "eps_lb" in body and "delta" in body


def check_memory_limit_formula(
    body: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the constants test_k8s_manifests checks the StatefulSet's limit with
    assert body.strip() == MEMORY_FORMULA


def check_sanitize_summary(body: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    avro = "avro-dead-letters.jsonl" in body  # the Avro container files' example
    err = sanitize_avro_example(tmp_path, capsys) if avro else sanitize_example(tmp_path, capsys)[1]
    for line in body.strip().splitlines():
        assert line in err.splitlines(), (line, err)


def check_readme_explain(body: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "vitals.yaml"
    config.write_text(readme_blocks("yaml")[0])
    code, out, _ = run_cli(["explain", "--config", str(config)], capsys)
    assert code == 0
    for line in body.strip().splitlines():
        assert line in out.splitlines(), (line, out)


def check_layers(body: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The layer diagram is the order .importlinter's layers contract enforces."""
    contract = (ROOT / ".importlinter").read_text().split("layers =", 1)[1].lstrip("\n")
    lines = contract.split("\n\n")[0].split("ignore_imports")[0].strip().splitlines()
    enforced = [line.strip().replace("privstream.", "") for line in lines]
    shown = [part.strip() for part in body.strip().split("->")]
    assert shown == enforced, (shown, enforced)


def check_real_event_estimate(
    body: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.project.test_real_event_data import check_estimate_block  # imports this module

    check_estimate_block(body, tmp_path, capsys)


TEXT_CHECKERS: dict[str, Callable[[str, Path, pytest.CaptureFixture[str]], None]] = {
    "cli  ->  worker": check_layers,
    "privstream: config error:": check_config_errors,
    "service/             the source root": check_module_tree,
    "raw topic ->": check_pipeline_diagram,
    "eps_lb =": check_audit_formula,
    "privstream sanitize: ": check_sanitize_summary,
    "heart_rate  integer": check_readme_explain,
    "limit = ": check_memory_limit_formula,
    "privstream estimate: 5,000 records from sanitized.jsonl": check_real_event_estimate,
}


@pytest.mark.parametrize(("name", "body"), blocks_of("text"), ids=block_ids(blocks_of("text")))
def test_text_block_is_checked(
    name: str, body: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkers = [c for prefix, c in TEXT_CHECKERS.items() if body.startswith(prefix)]
    assert len(checkers) == 1, f"{name}: register a checker for this block"
    checkers[0](body, tmp_path, capsys)


# --- the worked examples, re-run -------------------------------------------------------------


def readme_blocks(lang: str) -> list[str]:
    return [body for language, body in code_blocks(README) if language == lang]


def page_blocks(page: str, lang: str) -> list[str]:
    return [body for language, body in code_blocks(DOCS / page) if language == lang]


def sanitize_example(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[list[dict[str, Any]], str, list[dict[str, Any]]]:
    """Run the sanitize page's command: (records out, stderr, dead letters)."""
    out, dead = tmp_path / "sanitized.jsonl", tmp_path / "dead.jsonl"
    code, _, err = run_cli(
        [
            "sanitize",
            "--config",
            str(ROOT / "examples" / "telemetry.yaml"),
            "--input",
            str(DOCS / "examples" / "telemetry.jsonl"),
            "--output",
            str(out),
            "--dead-letter",
            str(dead),
        ],
        capsys,
    )
    assert code == 1  # 1 of 4 dead-lettered: over the default share, the output written
    records = [json.loads(line) for line in out.read_text().splitlines()]
    letters = [json.loads(line) for line in dead.read_text().splitlines()]
    err = err.replace(str(dead), "privstream-dead-letters.jsonl")
    return records, err.replace(str(out), "sanitized.jsonl"), letters


def sanitize_avro_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """Run the sanitize page's Avro command: its stderr, with the page's file names."""
    out, dead = tmp_path / "sanitized.avro", tmp_path / "avro-dead.jsonl"
    code, _, err = run_cli(
        [
            *("sanitize", "--config", str(ROOT / "examples" / "telemetry.yaml")),
            *("--input", str(DOCS / "examples" / "telemetry.avro")),
            *("--output", str(out), "--output-format", "avro", "--dead-letter", str(dead)),
        ],
        capsys,
    )
    assert code == 1  # 1 of 4 dead-lettered, as for the JSON Lines example
    err = err.replace(str(dead), "avro-dead-letters.jsonl")
    return err.replace(str(out), "sanitized.avro")


def two_points_of(config: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, list[float]]:
    """The two values each real field can be released as: hybrid at epsilon 0.5 is Duchi's
    binary report, the middle of the bounds plus or minus ``duchi_bound``."""
    _, out, _ = run_cli(["explain", "--config", str(config), "--format", "json"], capsys)
    fields = json.loads(out)["fields"]
    points = {}
    for f in fields:
        if f["kind"] == "real":
            assert f["mechanism"] == "hybrid" and f["params"]["pm_probability"] == 0, f
            middle = (f["params"]["lower"] + f["params"]["upper"]) / 2
            points[f["name"]] = [
                middle - f["params"]["duchi_bound"],
                middle + f["params"]["duchi_bound"],
            ]
    return points


def assert_telemetry_shape(
    records: list[dict[str, Any]], raw: list[dict[str, Any]], points: dict[str, list[float]]
) -> None:
    """What the sanitize page says of its output, for any run."""
    example = yaml.safe_load((ROOT / "examples" / "telemetry.yaml").read_text())
    domain = next(f["domain"] for f in example["fields"] if f["name"] == "country")
    assert len(records) == 3
    for out, src in zip(records, raw, strict=False):
        assert list(out) == ["ts", "seq", "battery_temp_c", "session_minutes", "country", "crashed"]
        assert (out["ts"], out["seq"]) == (src["ts"], src["seq"])
        for name, two in points.items():
            assert any(math.isclose(out[name], value, rel_tol=1e-12) for value in two), name
        assert out["country"] in domain and isinstance(out["crashed"], bool)


def test_sanitize_page_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = DOCS / "examples" / "telemetry.jsonl"
    shown_input, shown_output, shown_dead, _ = page_blocks("sanitize-a-file.md", "json")
    assert shown_input == source.read_text()
    raw = json_documents(shown_input)
    points = two_points_of(ROOT / "examples" / "telemetry.yaml", capsys)
    assert set(points) == {"battery_temp_c", "session_minutes"}

    records, _, letters = sanitize_example(tmp_path, capsys)
    assert_telemetry_shape(records, raw, points)
    assert_telemetry_shape(json_documents(shown_output), raw, points)
    # the dead letter has no noise in it: the documented one is exactly what a run writes
    assert letters == json_documents(shown_dead)


def test_sanitize_page_metadata_is_what_a_run_writes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The sidecar has no noise in it: the documented one is exactly a run's."""
    *_, shown_metadata = page_blocks("sanitize-a-file.md", "json")
    sanitize_example(tmp_path, capsys)
    written = (tmp_path / "sanitized.jsonl.privstream.json").read_text()
    assert json.loads(shown_metadata) == json.loads(written)


def test_sanitize_page_table_matches_its_blocks() -> None:
    """The in/out table repeats the documented input and output, value for value."""
    text = (DOCS / "sanitize-a-file.md").read_text(encoding="utf-8")
    shown_input, shown_output, _, _ = page_blocks("sanitize-a-file.md", "json")
    rows = re.findall(r"^\| (\d) \| (.*) \|$", text, re.M)
    assert [int(seq) for seq, _ in rows] == [1, 2, 3, 4]
    names = ["battery_temp_c", "session_minutes", "country", "crashed"]
    for (seq, cells), raw, out in zip(
        rows, json_documents(shown_input), json_documents(shown_output), strict=False
    ):
        for name, cell in zip(names, cells.split(" | "), strict=True):
            shown_in, shown_out = (re.sub(r" \(.*?\)", "", c) for c in cell.split(", "))
            assert json.loads(json.dumps(raw[name])) == yaml.safe_load(shown_in), (seq, name)
            assert out[name] == yaml.safe_load(shown_out), (seq, name)


def test_readme_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "vitals.yaml"
    config.write_text(readme_blocks("yaml")[0])
    record, shown = json_documents(readme_blocks("json")[0])
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text(json.dumps(record) + "\n")
    code, _, _ = run_cli(
        [
            "sanitize",
            "--config",
            str(config),
            "--input",
            str(source),
            "--output",
            str(out),
            "--dead-letter",
            str(tmp_path / "dead.jsonl"),
        ],
        capsys,
    )
    assert code == 0
    (released,) = [json.loads(line) for line in out.read_text().splitlines()]
    for output in (released, shown):
        assert list(output) == ["ts", "heart_rate", "smoker"]
        assert output["ts"] == record["ts"]
        assert isinstance(output["heart_rate"], int) and isinstance(output["smoker"], bool)


# --- generated pages, citations, links --------------------------------------------------------


def test_config_reference_page_is_generated() -> None:
    committed = (DOCS / "reference" / "config.md").read_text(encoding="utf-8")
    generated = docs_reference.render(docs_reference.config_schema())
    assert committed == generated, (
        "docs/reference/config.md is stale: "
        "python scripts/docs_reference.py > docs/reference/config.md"
    )


def test_config_reference_names_every_key() -> None:
    page = (DOCS / "reference" / "config.md").read_text(encoding="utf-8")
    schema = docs_reference.config_schema()
    for definition in [schema, *schema["$defs"].values()]:
        for key in definition["properties"]:
            assert f"| `{key}` |" in page, key


def test_sources_are_identified() -> None:
    """No bare "the thesis" or DESIGN.md: every citation names its document."""
    for path in [README, *PAGES]:
        text = path.read_text(encoding="utf-8")
        assert "DESIGN" not in text, path
        # the value `thesis` of `calibration` is a config literal, not a citation
        prose = text.replace("calibration: thesis", "")
        bare = re.findall(r"(?<![`\"])\bthesis\b(?![`\"])", prose)
        assert not bare, (path, len(bare))
    references = (DOCS / "references.md").read_text(encoding="utf-8")
    assert "M. Jazbec, *Splošna definicija diferencirane zasebnosti*" in references
    assert "University of Ljubljana, 2018" in references


def slug(heading: str) -> str:
    """Python-Markdown's toc slug: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    found = set(re.findall(r'<a id="([^"]+)">', text))
    for heading in re.findall(r"^#+ (.+)$", text, re.M):
        explicit = re.search(r"\{#([\w-]+)\}\s*$", heading)
        found.add(explicit.group(1) if explicit else slug(heading))
    return found


def test_readme_is_short_and_its_links_resolve() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    links = re.findall(r"\]\(([^)#]*)(?:#([^)]*))?\)", text)
    into_docs = [(target, anchor) for target, anchor in links if target.startswith("docs/")]
    assert len({t for t, _ in into_docs}) >= 14
    for target, anchor in links:
        if target.startswith("http"):
            continue
        path = ROOT / target if target else README
        assert path.is_file(), target
        if anchor:
            assert anchor in anchors(path), (target, anchor)


def test_every_page_is_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for page in PAGES:
        assert str(page.relative_to(DOCS)) in nav, page


def test_references_to_readme_sections_name_sections_it_has() -> None:
    """`README "Title"` in a comment or page names a `## Title` of README.md (the CHANGELOG
    is history: the sections it names may have moved since)."""
    headings = set(re.findall(r"^## (.+)$", README.read_text(encoding="utf-8"), re.M))
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    named = [
        (path, title)
        for path in tracked
        if path not in ("CHANGELOG.md", "tests/project/test_docs.py") and (ROOT / path).is_file()
        for title in re.findall(
            r'README "([^"]+)"', (ROOT / path).read_text(encoding="utf-8", errors="replace")
        )
    ]
    assert [(path, title) for path, title in named if title not in headings] == []
