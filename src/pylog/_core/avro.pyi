import numpy as np
from collections.abc import Buffer

def decode_values(program: np.ndarray, data: Buffer, starts: np.ndarray, ends: np.ndarray,
                  verdicts: np.ndarray, where: np.ndarray
                  ) -> list[tuple[bytes, bytes, bytes, bytes, bytes, int]]: ...
