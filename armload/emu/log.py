"""The printk log: records with their level and simulated timestamp, printed as the console does."""
from __future__ import annotations

from dataclasses import dataclass

LEVEL_NAMES = ["emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"]
DEFAULT_LEVEL = 4                 # CONFIG_MESSAGE_LOGLEVEL_DEFAULT


@dataclass
class LogRecord:
    text: str
    level: int
    time_ns: int

    def format(self) -> str:
        s, us = divmod(self.time_ns // 1000, 1_000_000)
        return f"[{s:5d}.{us:06d}] {self.text}"

    def to_dict(self) -> dict:
        return {"text": self.text, "level": self.level, "level_name": LEVEL_NAMES[self.level],
                "time_ns": self.time_ns}


class KernelLog:
    """printk records; a KERN_CONT fragment continues the previous line, as the kernel joins them."""

    def __init__(self, clock=None, console=None):
        self.records: list[LogRecord] = []
        self._pending: LogRecord | None = None
        self.clock = clock
        self.console = console

    @property
    def lines(self) -> list[str]:
        return [r.text for r in self.records]

    def printk(self, text: str, level: int | None = None, cont: bool = False) -> None:
        if self._pending is not None and not cont:
            self._flush()
        if self._pending is None:
            t = self.clock.ns() if self.clock is not None else 0
            self._pending = LogRecord("", DEFAULT_LEVEL if level is None else level, t)
        self._pending.text += text
        while self._pending is not None and "\n" in self._pending.text:
            line, rest = self._pending.text.split("\n", 1)
            rec = LogRecord(line, self._pending.level, self._pending.time_ns)
            self._emit(rec)
            self._pending = LogRecord(rest, rec.level, rec.time_ns) if rest else None

    def _flush(self) -> None:
        if self._pending is not None:
            self._emit(self._pending)
            self._pending = None

    def _emit(self, rec: LogRecord) -> None:
        self.records.append(rec)
        if self.console is not None:
            self.console(rec.format())

    def finish(self) -> None:
        self._flush()
