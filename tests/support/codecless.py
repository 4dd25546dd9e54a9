"""``python -m tests.support.codecless run ...``: the ``privstream`` CLI with a Kafka
client that has no snappy, lz4 or zstd, as every worker had before issue 30 (aiokafka
finds them in cramjam at each call; hidden here, a batch of them cannot be decoded)."""

from __future__ import annotations

import aiokafka.codec
from privstream.cli.main import main

if __name__ == "__main__":
    aiokafka.codec.cramjam = None
    raise SystemExit(main())
