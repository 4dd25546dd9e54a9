"""The newcomer's pages, run as written: every shell and YAML block of getting-started,
sanitize-a-file and run-on-a-topic, in order, in a fresh directory, against the real broker.

A block runs unless the line before its fence marks it:

* ``<!-- docs-test: skip (why) -->``: not run (the reason is required);
* ``<!-- docs-test: exit N (why) -->``: a shell block that must exit N;
* ``<!-- docs-test: background (why) -->``: a shell block started and left
  running (the worker) while the next blocks run, then stopped with SIGTERM:
  it must have stopped cleanly;
* ``<!-- docs-test: file NAME -->``: a YAML block saved as NAME for the next blocks.

An unmarked YAML block is a whole config: ``privstream explain`` must accept
it. An unmarked shell block runs with ``bash -e -o pipefail`` and must exit 0.
The directory holds links to the repository's ``docs/`` and ``examples/``
(the pages name files there) and ``privstream`` is on the PATH. The one
change to the text (``SUBSTITUTIONS``): run-on-a-topic's broker address,
topic names, group and HTTP port become the test broker's and this run's own,
so a second run, or another test, never shares its topics.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.faults import poll_until

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["getting-started.md", "sanitize-a-file.md", "run-on-a-topic.md"]
MARK = r"<!-- docs-test: (?P<mark>skip|background|exit \d+|file \S+)(?: \((?P<why>[^)]*)\))? -->"
BLOCK = re.compile(
    rf"(?:^{MARK}\n)?^```(?P<lang>\w*)\n(?P<body>.*?)^```",
    re.S | re.M,
)
RUN_TIMEOUT_S = 180


@dataclass(frozen=True)
class Block:
    lang: str
    body: str
    mark: str | None
    why: str | None


def page_blocks(page: str) -> list[Block]:
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    return [
        Block(m["lang"], m["body"], m["mark"], m["why"])
        for m in BLOCK.finditer(text)
        if m["lang"] in ("sh", "yaml")
    ]


class Reader:
    """Runs one page's blocks in ``cwd``, one after the other."""

    def __init__(self, cwd: Path, substitutions: dict[str, str]) -> None:
        self.cwd = cwd
        self.substitutions = substitutions
        self.env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
        self.background: list[tuple[subprocess.Popen[bytes], Path]] = []
        #: what each block that ran to its end printed (stdout and stderr)
        self.said: list[str] = []
        for linked in ("docs", "examples"):
            (cwd / linked).symlink_to(ROOT / linked)

    def text(self, body: str) -> str:
        for old, new in self.substitutions.items():
            body = re.sub(old, new, body)
        return body

    def run(self, number: int, block: Block) -> None:
        body = self.text(block.body)
        if block.mark == "skip":
            assert block.why, f"block {number}: say why it is skipped"
        elif block.lang == "yaml":
            self._config(number, body, block.mark)
        elif block.mark == "background":
            log = self.cwd / f"block-{number}.log"
            with log.open("wb") as out:
                started = subprocess.Popen(
                    ["bash", "-e", "-c", body],
                    cwd=self.cwd,
                    env=self.env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            self.background.append((started, log))
        else:
            wanted = int(block.mark.split()[1]) if block.mark else 0
            done = self.shell(body)
            assert done.returncode == wanted, f"block {number}:\n{body}\n{self._said(done)}"

    def shell(self, body: str) -> subprocess.CompletedProcess[bytes]:
        try:
            done = subprocess.run(
                ["bash", "-e", "-o", "pipefail", "-c", body],
                cwd=self.cwd,
                env=self.env,
                capture_output=True,
                timeout=RUN_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            logs = "\n".join(log.read_text(errors="replace")[-3000:] for _, log in self.background)
            raise AssertionError(f"{body} still running after {RUN_TIMEOUT_S} s\n{logs}") from None
        self.said.append(self._said(done))
        return done

    def _config(self, number: int, body: str, mark: str | None) -> None:
        if mark is not None and mark.startswith("file "):
            (self.cwd / mark.split()[1]).write_text(body, encoding="utf-8")
            return
        path = self.cwd / f"block-{number}.yaml"
        path.write_text(body, encoding="utf-8")
        done = self.shell(f"privstream explain --config {path.name}")
        assert done.returncode == 0, f"block {number}: not a config\n{body}\n{self._said(done)}"

    @staticmethod
    def _said(done: subprocess.CompletedProcess[bytes]) -> str:
        return (done.stdout + done.stderr).decode(errors="replace")[-3000:]

    async def stop(self) -> None:
        """SIGTERM to each background block: its worker must say it stopped cleanly."""
        for started, log in self.background:
            os.killpg(started.pid, signal.SIGTERM)
            await stopped_cleanly(log)
            started.wait(timeout=60)


def log_tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


async def stopped_cleanly(log: Path) -> None:
    async def said() -> bool:
        return "stopped cleanly" in log_tail(log)

    await poll_until(said, 60, "stopped cleanly", why=lambda: log_tail(log))


def test_every_block_is_run_or_marked() -> None:
    """The pages hold blocks, and each mark says why (a skipped block most of all)."""
    for page in PAGES:
        blocks = page_blocks(page)
        assert blocks, page
        for block in blocks:
            assert block.mark != "skip" or block.why, (page, block.body)
    assert any(b.mark == "background" for b in page_blocks("run-on-a-topic.md"))


@pytest.mark.parametrize("page", ["getting-started.md", "sanitize-a-file.md"])
async def test_a_file_page_runs_as_written(page: str, tmp_path: Path) -> None:
    reader = Reader(tmp_path, {})
    for number, block in enumerate(page_blocks(page)):
        reader.run(number, block)
    # the pages' configs declare no mechanism that loses to auto: no warning on any command
    assert not [said for said in reader.said if "WARNING" in said], reader.said
    if page == "sanitize-a-file.md":  # what the page says the run leaves behind
        assert len((tmp_path / "sanitized.jsonl").read_text().splitlines()) == 3
        assert (tmp_path / "sanitized.jsonl.privstream.json").is_file()
        assert len((tmp_path / "privstream-dead-letters.jsonl").read_text().splitlines()) == 1


async def test_run_on_a_topic_runs_as_written(kafka_bootstrap: str, tmp_path: Path) -> None:
    run = f"docs-{secrets.token_hex(4)}"
    reader = Reader(
        tmp_path,
        {
            r"127\.0\.0\.1:9092": kafka_bootstrap,
            r"telemetry\.(?=raw|sanitized)": f"{run}.",
            r"privstream-demo": run,
            r"port: 9400": "port: 0",
        },
    )
    try:
        for number, block in enumerate(page_blocks("run-on-a-topic.md")):
            reader.run(number, block)
    finally:
        await reader.stop()
    worker_log = reader.background[0][1].read_text()
    assert "Traceback" not in worker_log, worker_log[-3000:]
    assert not [line for line in worker_log.splitlines() if " ERROR " in line], worker_log
