"""Run summaries: TensorBoard event files and ``progress.jsonl``."""

from __future__ import annotations

import json
import os
from typing import Any

__all__ = ["SummaryLogger", "truncate_progress_log"]


def truncate_progress_log(path: str, last_iteration: int) -> None:
    """Drops lines of ``progress.jsonl`` written after ``last_iteration`` (on resume those
    iterations are trained again); an unreadable trailing line is dropped too."""
    if not os.path.isfile(path):
        return
    kept = []
    with open(path) as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if record.get("iteration", 0) <= last_iteration:
                kept.append(json.dumps(record))
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write("".join(line + "\n" for line in kept))
    os.replace(tmp, path)


class SummaryLogger:
    """Writes scalars to TensorBoard (``train/`` and ``eval/`` under ``root_dir``) and one
    JSON object per summary to ``root_dir/progress.jsonl``.

    Args:
        root_dir: the run's directory.
        purge_step: on resume, TensorBoard events at or after this step are discarded.
    """

    def __init__(self, root_dir: str, *, purge_step: int | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self._writers = {
            group: SummaryWriter(os.path.join(root_dir, group), purge_step=purge_step)
            for group in ("train", "eval")
        }
        self._progress = open(os.path.join(root_dir, "progress.jsonl"), "a")  # noqa: SIM115

    def write(
        self, group: str, step: int, scalars: dict[str, Any], record: dict[str, Any]
    ) -> None:
        """Writes ``scalars`` under ``group/`` at ``step`` and appends ``record`` plus the
        scalars (named ``group/name``) as one line of ``progress.jsonl``. Scalars may be
        numbers or 0-d tensors."""
        writer = self._writers[group]
        line = dict(record)
        for name, value in scalars.items():
            value = float(value)
            writer.add_scalar(f"{group}/{name}", value, step)
            line[f"{group}/{name}"] = value
        self._progress.write(json.dumps(line) + "\n")
        self._progress.flush()

    def text(self, tag: str, text: str) -> None:
        """Writes a text summary (e.g. the operative config)."""
        self._writers["train"].add_text(tag, f"<pre>{text}</pre>")

    def flush(self) -> None:
        """Writes everything buffered to disk."""
        for writer in self._writers.values():
            writer.flush()
        self._progress.flush()

    def close(self) -> None:
        """Flushes and closes every file."""
        for writer in self._writers.values():
            writer.close()
        self._progress.close()
