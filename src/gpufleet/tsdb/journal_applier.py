"""The thread that moves journalled uploads into DuckDB: every `interval_s`, or at once when
woken (the store wakes it when enough samples are waiting), so DuckDB sees a few large
transactions instead of one per upload."""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable

log = logging.getLogger(__name__)


class JournalApplier:
    """`apply` is a bound method held weakly: a store dropped without `close()` is still
    collected (its DuckDB handles freed), and the thread then ends."""

    def __init__(self, apply: Callable[[], None], interval_s: float,
                 name: str = "tsdb-journal-applier"):
        self._apply = weakref.WeakMethod(apply)
        self.interval_s = interval_s
        self._wake = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        """Stop without applying again (the caller decides whether to apply what is left)."""
        self._stopping = True
        self._wake.set()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        while True:
            self._wake.wait(self.interval_s)
            self._wake.clear()
            apply = self._apply()
            if self._stopping or apply is None:
                return
            try:
                apply()
            except Exception:
                # The uploads stay journalled and pending; the next round tries again, and a
                # query or a full backlog surfaces the error to a caller.
                log.exception("applying the telemetry journal to DuckDB failed; will retry")
            finally:
                del apply
