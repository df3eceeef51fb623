import numpy as np
from collections.abc import Buffer

def frame_values(program: np.ndarray, data: Buffer, offsets: np.ndarray,
                 verdicts: np.ndarray, where: np.ndarray) -> None: ...
