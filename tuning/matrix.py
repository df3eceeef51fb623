"""The experiment matrix, from a TOML file (see tuning/matrix.toml for every key).

``[matrix]`` lists the values of each dimension; every combination is a row.
Filesystems and write-back profiles are named tables (``[filesystems.<name>]``,
``[writeback.<name>]``) that the matrix refers to by name. Unknown keys and
unknown names are errors that name them.
"""

from __future__ import annotations

import itertools
import tomllib
from dataclasses import asdict, dataclass

from .machine import FsProfile

__all__ = ["Matrix", "Row", "load"]

DIMENSIONS = {
    "filesystem": str, "devices": int, "record_size": int, "batch_bytes": int, "flush": str,
    "io": str, "engine": str, "fadvise": bool, "partitions_per_device": int, "writeback": str,
}
FLUSH = ("none", "16MiB", "batch")
IO = ("buffered", "direct")
ENGINES = ("io_uring", "portable")
RUN_KEYS = {"volume_mib": 256, "repeats": 3, "device_mib": 1024, "results_topic": "tuning-results",
            "memory": "warm"}


@dataclass(frozen=True)
class Row:
    """One configuration of the matrix."""

    filesystem: str
    devices: int
    record_size: int
    batch_bytes: int
    flush: str
    io: str
    engine: str
    fadvise: bool
    partitions_per_device: int
    writeback: str

    @property
    def key(self) -> str:
        """A stable name of the configuration (the results' record key)."""
        return (f"{self.filesystem}/{self.devices}dev/{self.record_size}B/"
                f"{self.batch_bytes // 1024}KiB/{self.flush}/{self.io}/{self.engine}/"
                f"fadvise={'on' if self.fadvise else 'off'}/"
                f"{self.partitions_per_device}ppd/{self.writeback}")

    @property
    def batch_records(self) -> int:
        return max(1, self.batch_bytes // max(self.record_size, 1))

    def flush_messages(self) -> int | None:
        """flush.messages for the row's flush policy (None: the OS flushes)."""
        if self.flush == "none":
            return None
        if self.flush == "batch":
            return self.batch_records
        return max(1, (16 << 20) // max(self.record_size, 1))

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Matrix:
    run: dict
    filesystems: dict[str, FsProfile]
    writeback: dict[str, dict[str, object]]
    rows: list[Row]

    def groups(self):
        """Rows grouped as the rig builds them: by (filesystem, devices), then by
        write-back profile (one mkfs/mount, one sysctl change per group)."""
        key = lambda r: (r.filesystem, r.devices, r.writeback)  # noqa: E731
        for (fs, devices, wb), rows in itertools.groupby(sorted(self.rows, key=key), key):
            yield fs, devices, wb, list(rows)


def _check_keys(table: dict, allowed, where: str) -> None:
    unknown = set(table) - set(allowed)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} "
                         f"(known: {', '.join(sorted(allowed))})")


def load(path: str) -> Matrix:
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    _check_keys(doc, {"run", "filesystems", "writeback", "matrix"}, path)
    run = dict(RUN_KEYS)
    _check_keys(doc.get("run", {}), RUN_KEYS, f"{path} [run]")
    run.update(doc.get("run", {}))
    if run["memory"] not in ("warm", "cold"):
        raise ValueError(f"{path} [run] memory must be warm or cold, not {run['memory']!r}")
    filesystems = {}
    for name, t in doc.get("filesystems", {}).items():
        _check_keys(t, {"type", "mkfs", "mount_options"}, f"{path} [filesystems.{name}]")
        if t.get("type") not in ("ext4", "xfs"):
            raise ValueError(f"{path} [filesystems.{name}] type must be ext4 or xfs")
        filesystems[name] = FsProfile(name, t["type"], tuple(t["mkfs"]), t.get("mount_options", ""))
    writeback = {"default": {}}
    for name, t in doc.get("writeback", {}).items():
        for key in t:
            if not key.startswith("vm.dirty_"):
                raise ValueError(f"{path} [writeback.{name}] {key}: only vm.dirty_* knobs")
        writeback[name] = dict(t)
    m = doc.get("matrix", {})
    _check_keys(m, DIMENSIONS, f"{path} [matrix]")
    missing = set(DIMENSIONS) - set(m) - {"engine", "fadvise", "partitions_per_device",
                                          "writeback", "batch_bytes"}
    if missing:
        raise ValueError(f"{path} [matrix]: missing {', '.join(sorted(missing))}")
    values = {
        "filesystem": m["filesystem"], "devices": m["devices"], "record_size": m["record_size"],
        "batch_bytes": m.get("batch_bytes", [1 << 20]), "flush": m["flush"], "io": m["io"],
        "engine": m.get("engine", ["io_uring"]), "fadvise": m.get("fadvise", [False]),
        "partitions_per_device": m.get("partitions_per_device", [2]),
        "writeback": m.get("writeback", ["default"]),
    }
    for dim, vals in values.items():
        if not isinstance(vals, list) or not vals:
            raise ValueError(f"{path} [matrix] {dim} must be a non-empty list")
        for v in vals:
            if not isinstance(v, DIMENSIONS[dim]):
                raise ValueError(f"{path} [matrix] {dim}: {v!r} is not a {DIMENSIONS[dim].__name__}")
    for name in values["filesystem"]:
        if name not in filesystems:
            raise ValueError(f"{path} [matrix] filesystem {name!r} has no [filesystems.{name}]")
    for name in values["writeback"]:
        if name not in writeback:
            raise ValueError(f"{path} [matrix] writeback {name!r} has no [writeback.{name}]")
    for dim, allowed in (("flush", FLUSH), ("io", IO), ("engine", ENGINES)):
        for v in values[dim]:
            if v not in allowed:
                raise ValueError(f"{path} [matrix] {dim} {v!r}: one of {', '.join(allowed)}")
    rows = [Row(*combo) for combo in itertools.product(*(values[d] for d in DIMENSIONS))]
    return Matrix(run, filesystems, writeback, rows)
