"""``privstream sanitize``: JSON Lines in, sanitized JSON Lines out.

A bad line never stops the run: it goes to the dead-letter file with its
line number and reason. The dead-letter file holds raw data: it is as
sensitive as the input, so it is readable by its owner only, and never the
input, the output or (without ``--overwrite``) an existing path
(``release_files``). A run that dead-letters more than
``--max-dead-letter-share`` of its records still writes its output and
exits 1 (``Summary.share_report``; docs/sanitize-a-file.md says why).
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO, Protocol

from privstream.aggregates import FreshCells
from privstream.cli.aggregates_file import FileAggregates
from privstream.cli.avro_files import AvroOutput, avro_chunks, reads_avro
from privstream.cli.metadata import write_sidecar
from privstream.cli.release_files import OUTPUT_MODE, PRIVATE_MODE, AtomicFile, FilePaths
from privstream.config import AppConfig
from privstream.errors import MisuseError, PrivstreamError, Rejected
from privstream.mechanisms import NoiseSource
from privstream.pipeline import BatchResult, RecordPlan
from privstream.pipeline.batch import process_block
from privstream.pipeline.decode import Names
from privstream.pipeline.parse import parse_row
from privstream.pipeline.plan import unkeyed

#: lines per ``process_block`` call at most when the input is an iterable of lines
CHUNK_LINES = 10_000
#: bytes per read of a file (about 7,000 reference records per ``process_block`` call):
#: bulk reads and C-level splitting, memory bounded by bytes rather than lines
BLOCK_BYTES = 2**20

#: (number of the first line, the lines without their line ends)
Chunk = tuple[int, list[bytes]]


def counted(number: int, noun: str) -> str:
    """``1 record``, ``2 records``: a count and its noun, in the plural unless one."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


@dataclass
class Summary:
    records_in: int = 0
    records_out: int = 0
    blank_lines: int = 0
    reasons: Counter[str] = field(default_factory=Counter)
    #: reason -> (line, detail) of its first dead letter: a detail names the field, never a value
    first: dict[str, tuple[int, str]] = field(default_factory=dict)
    #: what a dead letter's position counts: lines of JSON Lines, records of an Avro file
    unit: str = "line"

    @property
    def dead_lettered(self) -> int:
        return sum(self.reasons.values())

    @property
    def share(self) -> float:
        """The dead-lettered share of the records (blank lines are no records)."""
        return self.dead_lettered / self.records_in if self.records_in else 0.0

    def share_report(self, max_share: float, output: str | None, dead_letter: str) -> str:
        """What exit 1 says when ``share`` exceeds ``max_share``: each reason's count and first
        dead letter, where the records went, and what to do next."""
        lines = [
            f"{self.dead_lettered} of {counted(self.records_in, 'record')} ({self.share:.1%}) were "
            f"dead-lettered, more than --max-dead-letter-share {max_share:g} ({max_share:.1%}):"
        ]
        for reason, count in sorted(self.reasons.items(), key=lambda rc: (-rc[1], rc[0])):
            line, detail = self.first[reason]
            lines.append(f"  {reason} {count}, the first at {self.unit} {line}: {detail}")
        lines += self._next_steps(output, dead_letter)
        return "\n".join(f"privstream: {line}" for line in lines)

    def _next_steps(self, output: str | None, dead_letter: str) -> list[str]:
        if not self.records_out:  # nothing released: a second run is no second release
            overwrite = f" (with --overwrite: {output} holds no record)" if output else ""
            return [
                f"no record was released: fix the cause (the raw dead-lettered {self.unit}s are "
                f"in {dead_letter}) and run again{overwrite}"
            ]
        where = f"in {output}" if output else "on stdout"
        return [
            f"the sanitized records ({self.records_out}) are {where} all the same, a release "
            "like any other: never also release another run over the same records",
            f"the raw dead-lettered {self.unit}s are in {dead_letter}: fix them and sanitize "
            f"those {self.unit}s alone, or fix the config and run again with --overwrite if "
            "the output was never shared; a larger --max-dead-letter-share accepts this share",
        ]

    def render(self, dead_letter_path: str) -> str:
        dead = self.dead_lettered
        text = (
            f"privstream sanitize: {counted(self.records_in, 'record')} in, "
            f"{self.records_out} sanitized, "
            f"{dead} dead-lettered"
        )
        if dead:
            reasons = ", ".join(f"{r} {n}" for r, n in sorted(self.reasons.items()))
            text += f" ({reasons}) -> {dead_letter_path}"
        if self.blank_lines:
            text += f"; {counted(self.blank_lines, 'blank line')} skipped"
        return text


def _line_chunks(lines: Iterable[bytes]) -> Iterator[Chunk]:
    """At most ``CHUNK_LINES`` lines and about ``BLOCK_BYTES`` per chunk (long lines: fewer)."""
    chunk: list[bytes] = []
    first, size = 1, 0
    for number, line in enumerate(lines, start=1):
        chunk.append(line.rstrip(b"\r\n"))
        size += len(line)
        if len(chunk) == CHUNK_LINES or size >= BLOCK_BYTES:
            yield first, chunk
            chunk, first, size = [], number + 1, 0
    if chunk:
        yield first, chunk


def _block_chunks(stream: io.BufferedIOBase) -> Iterator[Chunk]:
    """The stream's lines with their line ends, ``BLOCK_BYTES`` at a time.

    ``BytesIO.readlines`` finds the line ends with ``memchr`` (44 ns a reference
    line with the read, against 80 ns for ``bytes.split``, which tests byte by
    byte). A line longer than a block is carried over until its newline arrives;
    the partial line a block ends with is joined to the next block's first line
    alone (no copy of the block). JSON ignores the line end (whitespace): see
    ``_sanitize_chunk`` for what else sees it.
    """
    first, carry = 1, b""
    while data := stream.read(BLOCK_BYTES):
        lines = io.BytesIO(data).readlines()
        lines[0] = carry + lines[0]
        carry = b"" if lines[-1].endswith(b"\n") else lines.pop()
        if lines:
            yield first, lines
            first += len(lines)
    if carry:
        yield first, [carry]


def _dead_letter_line(unit: str, number: int, raw: bytes, reason: str, detail: str) -> bytes:
    entry: dict[str, object] = {unit: number, "reason": reason, "detail": detail}
    try:
        entry["raw"] = raw.decode("utf-8")
    except UnicodeDecodeError:
        entry["raw_base64"] = base64.b64encode(raw).decode()
    return json.dumps(entry).encode() + b"\n"


class FileModeError(PrivstreamError):
    """The config asks for something a file cannot give (a per-subject ledger): exit 2."""


def check_file_mode(config: AppConfig) -> None:
    """Refuse ``privacy.ledger``: files have no Kafka timestamps, keys or changelog.

    An in-memory ledger would start empty on every run, so a subject in two
    files would get two budgets: the per-subject guarantee the config states
    would not hold (docs/ledger.md, File mode).
    """
    if config.privacy.ledger is not None:
        raise FileModeError(
            "privacy.ledger: sanitize cannot enforce a per-subject ledger on a file (no Kafka "
            "timestamps, keys or changelog: every run would start every subject's budget "
            "afresh); sanitize on a topic, or remove privacy.ledger for the file (its records "
            "then carry the per-record guarantee only)"
        )


class Output(Protocol):
    """How released records are written: JSON Lines (``JsonLines``) or an Avro container
    file (``privstream.cli.avro_files.AvroOutput``)."""

    def begin(self, out: BinaryIO) -> None:
        """Write what precedes the first record (a header)."""

    def release(
        self,
        plan: RecordPlan,
        lines: Sequence[bytes],
        source: NoiseSource,
        out: BinaryIO,
        reads: Names = (),
    ) -> BatchResult:
        """Sanitize ``lines``, write the released records to ``out``, return the result;
        ``reads``: the aggregates' fields, for a writer that can hand its decode over
        (``result.decoded``)."""


class JsonLines:
    """One JSON object per line, as ``process_block`` joins them."""

    def begin(self, out: BinaryIO) -> None:
        pass

    def release(
        self,
        plan: RecordPlan,
        lines: Sequence[bytes],
        source: NoiseSource,
        out: BinaryIO,
        reads: Names = (),
    ) -> BatchResult:
        result = process_block(plan, lines, source, reads)
        if result.joined:  # every record followed by its newline, in one text
            out.write(result.joined)
        return result


def file_output(output_format: str, config: AppConfig, plan: RecordPlan) -> Output:
    """The ``--output-format``'s writer; ``avro`` raises ``OutputSchemaError`` for a config
    whose fields Avro cannot hold, before anything is read."""
    return AvroOutput(config, plan) if output_format == "avro" else JsonLines()


def sanitize_stream(
    plan: RecordPlan,
    lines: BinaryIO | Iterable[bytes],
    out: BinaryIO,
    dead_letter_path: str,
    source: NoiseSource,
    aggregates: FileAggregates | None = None,
    *,
    chunks: Iterable[Chunk] | None = None,
    output: Output | None = None,
) -> Summary:
    """Sanitize a binary stream (read in blocks) or an iterable of lines into ``out``.

    ``chunks``, when given, are read instead of ``lines`` (records of an Avro file:
    ``avro_files.avro_chunks``; dead letters then count records, not lines).
    ``output`` writes the released records (default: JSON Lines). ``aggregates``,
    when given, is fed every released record (``FileAggregates``).

    The dead letters appear at ``dead_letter_path`` only if the whole input was
    read (``AtomicFile``), and only if there are any: a run without dead letters
    leaves whatever is at that path as it was.
    """
    summary = Summary(unit="line" if chunks is None else "record")
    if chunks is None:
        chunks = (
            _block_chunks(lines) if isinstance(lines, io.BufferedIOBase) else _line_chunks(lines)
        )
    output = JsonLines() if output is None else output
    reads = () if aggregates is None else aggregates.reads(plan)
    dead_file = AtomicFile(dead_letter_path, PRIVATE_MODE)  # created at the first dead letter
    try:
        output.begin(out)
        for first, chunk in chunks:
            result = output.release(plan, chunk, source, out, reads)
            released = _sanitize_chunk(plan, first, chunk, result, dead_file, summary)
            if aggregates is not None:
                aggregates.feed(chunk, released, result.decoded)
        out.flush()
        dead_file.commit()
    finally:
        dead_file.discard()  # a no-op once committed
    return summary


def _sanitize_chunk(
    plan: RecordPlan,
    first: int,
    lines: list[bytes],
    result: BatchResult,
    dead_file: AtomicFile,
    summary: Summary,
) -> list[int]:
    """The dead letters and counts of one chunk, released in one ``process_block`` call
    (``result``); per-line Python only for dead letters.

    Returns the positions in ``lines`` of the records released.

    Lines may end with their line end (``_block_chunks``): JSON reads a trailing
    ``\\n`` or ``\\r\\n`` as whitespace, so a line is released, and with what
    value, exactly as without it. A blank line never decodes: it comes back as a
    dead letter and is counted as blank here instead, so the usual chunk needs
    no scan for blank lines. A dead letter's reason and detail are those of the
    line without its line end: a syntax error's position is recomputed on it
    (``_names_a_position``), every other verdict ignores trailing whitespace.
    """
    blank = 0
    for dead in result.dead_letters:
        line = lines[dead.index]
        raw = line.rstrip(b"\r\n")
        if not raw.strip():
            blank += 1
            continue
        reason, detail = dead.reason, dead.detail
        if raw is not line and _names_a_position(reason, detail):
            reason, detail = _verdict(plan, raw)
        dead_file.write(_dead_letter_line(summary.unit, first + dead.index, raw, reason, detail))
        summary.reasons[reason] += 1
        summary.first.setdefault(reason, (first + dead.index, detail))
    summary.blank_lines += blank
    summary.records_in += len(lines) - blank
    summary.records_out += len(result.output_index)
    return result.output_index


def _names_a_position(reason: str, detail: str) -> bool:
    """Whether a verdict may depend on the line end: a JSON syntax error's position.

    Only that verdict is recomputed without the line end. Every other one is kept
    as ``process_batch`` gave it: a recursion error (``invalid_json`` without a
    position) depends on the stack's depth as well as the line's nesting, and the
    shallower stack of a second parse could decode a line nested right at the
    limit (then released by nobody, or renamed ``not_object``).
    """
    return reason == "invalid_json" and " at char " in detail


def _verdict(plan: RecordPlan, raw: bytes) -> tuple[str, str]:
    """The reason and detail ``process_batch`` gives ``raw`` (a line without its line end)."""
    try:
        parse_row(unkeyed(plan), raw)
    except Rejected as rejected:
        return rejected.reason, rejected.detail
    # JSON whitespace cannot turn a rejected record into an accepted one
    raise MisuseError("a line dead-lettered with its line end parses without it")


def run_sanitize(
    plan: RecordPlan,
    paths: FilePaths,
    source: NoiseSource,
    aggregates: FileAggregates | None = None,
    *,
    input_format: str = "auto",
    output: Output | None = None,
) -> Summary:
    """Sanitize ``paths.input`` into ``paths.output``, whole or not at all (``AtomicFile``).

    ``input_format`` (``--input-format``): ``json`` (JSON Lines), ``avro`` (a container
    file) or ``auto``, which reads a file that starts with the container magic as Avro
    (``avro_files.reads_avro``). ``output`` writes the records (default: JSON Lines).

    Once the input is read: the dead letters appear, the aggregates are
    released into a temporary file (``aggregates``), an earlier sidecar goes,
    the output is renamed into place, then the aggregates' file, and the
    sidecar is written. A crash between two steps leaves an output without a
    sidecar (``estimate`` refuses it), never a sidecar vouching for another
    output. A run that fails before the renames leaves the earlier files as
    they were.
    """
    with contextlib.ExitStack() as stack:
        src = stack.enter_context(open(paths.input, "rb")) if paths.input else sys.stdin.buffer
        out = None if paths.output is None else AtomicFile(paths.output, OUTPUT_MODE)
        if out is not None:
            stack.callback(out.discard)  # a no-op once committed
        dst = sys.stdout.buffer if out is None else out.stream
        chunks = None
        if reads_avro(input_format, src):
            chunks = avro_chunks(src, paths.input or "stdin")
        summary = sanitize_stream(
            plan, src, dst, paths.dead_letter, source, aggregates, chunks=chunks, output=output
        )
        rows = None
        if aggregates is not None and paths.aggregates is not None:
            rows = AtomicFile(paths.aggregates, OUTPUT_MODE)
            stack.callback(rows.discard)
            rows.write(aggregates.encoded(FreshCells()))
        if paths.metadata is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(paths.metadata)
        if out is not None:
            out.commit()
        if rows is not None:
            rows.commit()
    if paths.metadata is not None:
        write_sidecar(paths.metadata, plan, summary.records_out)
    return summary
