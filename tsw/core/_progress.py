"""The progress of long calls (``verbose=True``): a tqdm bar, or a printed line.

One helper for every long-running public function, so that each shows its progress the same
way: ``tqdm`` when it is installed (an optional import: ``pip install tqdm``), otherwise a
line on standard output every tenth of the run. With ``verbose=False`` it does nothing.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

__all__ = ["Progress"]


class Progress:
    """A progress bar of ``total`` steps named ``desc``; a no-op unless ``verbose``.

    Use it as a context manager (``with Progress(verbose, n, "pairwise_tsw") as bar:``)
    and call ``bar.update(k, name=value, ...)`` after every ``k`` steps: the keywords are
    shown beside the bar (or on the printed line).
    """

    def __init__(self, verbose: bool, total: int, desc: str, unit: str = "it") -> None:
        self.verbose, self.total, self.desc, self.unit = verbose, max(int(total), 0), desc, unit
        self.done, self._next_line = 0, 0
        self._bar: Any = None
        if verbose:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                self._bar = None
            else:
                self._bar = tqdm(total=self.total, desc=desc, unit=unit)

    def update(self, n: int = 1, **postfix: object) -> None:
        """Count ``n`` more steps done; ``postfix`` values are shown beside the bar."""
        if not self.verbose:
            return
        self.done += n
        shown = {k: f"{v:.4g}" if isinstance(v, float) else v for k, v in postfix.items()}
        if self._bar is not None:
            self._bar.update(n)
            if shown:
                self._bar.set_postfix(shown)
            return
        if self.done >= self._next_line or self.done >= self.total:
            extra = "".join(f", {k} {v}" for k, v in shown.items())
            print(f"{self.desc}: {self.done}/{self.total} {self.unit}{extra}", flush=True)
            self._next_line = self.done + max(1, self.total // 10)

    def close(self) -> None:
        """Close the bar (a no-op without tqdm or without ``verbose``)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
