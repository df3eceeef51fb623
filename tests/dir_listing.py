"""A whole directory tree as a value, to prove that reading it wrote nothing: every
file and directory with its kind, inode, size, mtime and (a file) SHA-256.
:func:`age` first sets every mtime to a fixed past time, so that a rewrite with the
same bytes, or a file created and removed again, shows as a changed mtime."""

import hashlib
import os

PAST_NS = 1_000_000_000 * 10**9          # 2001: any change of a file moves it to now


def listing(root) -> dict[str, tuple]:
    """Every file and directory under `root` (itself included, as "."): is-dir, inode,
    size, mtime in ns and, for a file, the SHA-256 of its bytes."""
    out = {}
    for dirpath, dirs, names in os.walk(root):
        for name in [""] + dirs + names if dirpath == str(root) else dirs + names:
            path = os.path.join(dirpath, name) if name else dirpath
            st = os.lstat(path)
            digest = None
            if os.path.isfile(path):
                with open(path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
            out[os.path.relpath(path, root)] = (os.path.isdir(path), st.st_ino, st.st_size,
                                                st.st_mtime_ns, digest)
    return out


def age(root) -> dict[str, tuple]:
    """Sets every mtime under `root` to PAST_NS (files first, then the dirs, deepest
    first); returns the listing."""
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            os.utime(os.path.join(dirpath, name), ns=(PAST_NS, PAST_NS))
    for dirpath, _dirs, _names in sorted(os.walk(root), key=lambda w: -w[0].count(os.sep)):
        os.utime(dirpath, ns=(PAST_NS, PAST_NS))
    return listing(root)


def changes(before: dict[str, tuple], after: dict[str, tuple]) -> list[str]:
    """What differs, one line per path (for an assertion's message)."""
    fields = ("is-dir", "inode", "size", "mtime", "sha256")
    out = [f"added {p}" for p in sorted(after.keys() - before.keys())]
    out += [f"removed {p}" for p in sorted(before.keys() - after.keys())]
    for p in sorted(before.keys() & after.keys()):
        diff = [f for f, a, b in zip(fields, before[p], after[p]) if a != b]
        if diff:
            out.append(f"changed {p}: {', '.join(diff)}")
    return out
