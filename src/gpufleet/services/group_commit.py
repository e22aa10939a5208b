"""Group commit: uploads that arrive together are written to the telemetry store together.

Each API thread hands its batch over and waits. One of the waiting threads leads: it takes
every batch queued so far (up to `max_samples`), writes them in one store call — one
transaction, one fsync — and wakes the others with their answers. While it writes, new
batches queue for the next group, so under load groups grow and the cost of a commit is
shared; alone, a batch is written at once. A caller returns only after its batch is
durable, or with the error that kept it from being so (then nothing of it is acknowledged).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpufleet.tsdb import SampleColumns

Write = Callable[[Sequence[tuple[str, SampleColumns]]], list[int | None]]


@dataclass
class _Pending:
    key: str
    columns: SampleColumns
    done: bool = False
    answer: int | None = None
    error: BaseException | None = None


class GroupCommit:
    def __init__(self, write: Write, max_samples: int = 1_000_000):
        self._write = write
        self.max_samples = max_samples
        self._turn = threading.Condition()
        self._queue: list[_Pending] = []
        self._leading = False

    def submit(self, key: str, columns: SampleColumns) -> int | None:
        """Store one keyed batch; the samples stored, or None for a replay of a stored key."""
        return self.submit_all([(key, columns)])[0]

    def submit_all(self, batches: Sequence[tuple[str, SampleColumns]]) -> list[int | None]:
        """`submit` of several keyed batches at once (a remote-write body's, one per node):
        queued together, so they share a group's store call and fsync instead of waiting
        for one commit each. Raises the first error of a group that held one of them."""
        mine = [_Pending(key, columns) for key, columns in batches]
        if not mine:
            return []
        last = mine[-1]  # groups leave the queue in order: when it is done, all are
        with self._turn:
            self._queue.extend(mine)
            while True:
                if last.done:
                    return [self._answer(pending) for pending in mine]
                if not self._leading:
                    break
                self._turn.wait()
            self._leading = True
        try:
            while not last.done:
                self._write_one_group()
        finally:
            with self._turn:
                self._leading = False
                self._turn.notify_all()
        return [self._answer(pending) for pending in mine]

    def _write_one_group(self) -> None:
        with self._turn:
            group, samples = [], 0
            while self._queue and (not group or samples + len(self._queue[0].columns)
                                   <= self.max_samples):
                pending = self._queue.pop(0)
                samples += len(pending.columns)
                group.append(pending)
        try:
            answers = self._write([(p.key, p.columns) for p in group])
        except BaseException as exc:
            for pending in group:
                pending.error = exc
        else:
            for pending, answer in zip(group, answers, strict=True):
                pending.answer = answer
        with self._turn:
            for pending in group:
                pending.done = True
            self._turn.notify_all()

    @staticmethod
    def _answer(pending: _Pending) -> int | None:
        if pending.error is not None:
            raise pending.error
        return pending.answer
