"""Type stub of the C extension ``_murmur2.c`` (Kafka's partitioner hash; see its comment)."""

import numpy as np
import numpy.typing as npt

def murmur2(keys: list[bytes], out: npt.NDArray[np.uint32], /) -> None: ...
