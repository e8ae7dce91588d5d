"""The settle state of a bucket's objects between nights (``transforms.layout.SettleState``: each
path's size, mtime and when it was first seen so), kept in a small JSON file beside the warehouse:
a file still growing is deferred until it has settled (``transforms.layout.settled``).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from transforms.layout import SettleState

__all__ = ["load_settle_state", "save_settle_state"]


def load_settle_state(state_path: str | os.PathLike) -> SettleState:
    """The settle state saved by ``save_settle_state`` (empty when absent or unreadable)."""
    try:
        data = json.loads(Path(state_path).read_text())
        return {p: (int(v[0]), float(v[1]), float(v[2])) for p, v in data.items()}
    except (OSError, ValueError, TypeError, IndexError, AttributeError):
        return {}


def save_settle_state(state_path: str | os.PathLike, state: SettleState) -> None:
    """Write the state atomically (temp file, then rename)."""
    path = Path(state_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        json.dump({p: list(v) for p, v in state.items()}, f)
    os.replace(tmp, path)
