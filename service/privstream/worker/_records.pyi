"""Type stub of the C extension ``_records.c`` (Kafka v2 records of a batch; see its comment)."""

def encode(
    values: list[bytes], tails: list[bytes], start: int, out: bytearray, at: int, /
) -> tuple[int, int]: ...
def crc32c(data: bytes | bytearray | memoryview, /) -> int: ...

HARDWARE_CRC: bool
