"""Histograms as sparse rows: reading and checking the search index's input.

The index keeps every histogram as its nonzeros (CSR rows in float64 on the CPU: the
exact and Flowtree stages run in NumPy and POT) and compares it with others through
its tree embedding. :func:`read_hists` takes what :func:`tsw.tree_embedding` takes
(dense or sparse, numpy, scipy or torch; one histogram or many) with the same type,
dtype and device rules, and checks the values: finite, non-negative, no zero row, and
every row of the index's total mass.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch
from torch import Tensor

from tsw.core._validation import check_nonnegative, mass_rtol
from tsw.support._embedding import _triplets
from tsw.support._trees import SupportTrees

__all__ = ["Query", "Rows", "read_hists"]


@dataclasses.dataclass(frozen=True)
class Rows:
    """``k`` sparse histograms on ``n`` points: CSR ``indptr`` (k + 1,), ``idx`` and ``val``.

    Columns sorted within each row, values positive, float64.
    """

    indptr: np.ndarray
    idx: np.ndarray
    val: np.ndarray

    def __len__(self) -> int:
        return int(self.indptr.shape[0]) - 1

    @classmethod
    def empty(cls) -> Rows:
        """Return no rows."""
        return cls(np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0))

    def row(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Return the support points and masses of row ``i``."""
        lo, hi = self.indptr[i], self.indptr[i + 1]
        return self.idx[lo:hi], self.val[lo:hi]

    def take(self, rows: np.ndarray) -> Rows:
        """Return the rows ``rows`` (in that order)."""
        start, stop = self.indptr[rows], self.indptr[rows + 1]
        count = stop - start
        indptr = np.zeros(rows.shape[0] + 1, np.int64)
        np.cumsum(count, out=indptr[1:])
        pos = np.repeat(start - indptr[:-1], count) + np.arange(int(indptr[-1]))
        return Rows(indptr, self.idx[pos], self.val[pos])

    def concat(self, other: Rows) -> Rows:
        """Return these rows, then ``other``'s."""
        indptr = np.concatenate([self.indptr, other.indptr[1:] + self.indptr[-1]])
        idx = np.concatenate([self.idx, other.idx])
        return Rows(indptr, idx, np.concatenate([self.val, other.val]))

    def triplets(self, like: Tensor) -> tuple[Tensor, Tensor, Tensor, int]:
        """Return rows, columns and values as tensors in ``like``'s dtype and device, and k."""
        r = np.repeat(np.arange(len(self)), np.diff(self.indptr))
        dev = like.device
        return (
            torch.from_numpy(r).to(dev),
            torch.from_numpy(self.idx).to(dev),
            torch.from_numpy(self.val).to(dev, like.dtype),
            len(self),
        )

    def dense(self, n: int) -> np.ndarray:
        """Return the (k, n) dense array."""
        out = np.zeros((len(self), n))
        r = np.repeat(np.arange(len(self)), np.diff(self.indptr))
        out[r, self.idx] = self.val
        return out

    @property
    def nbytes(self) -> int:
        """Bytes held."""
        return self.indptr.nbytes + self.idx.nbytes + self.val.nbytes


@dataclasses.dataclass(frozen=True)
class Query:
    """Histograms read from the caller: their rows, their totals, and how to answer.

    ``numpy``: numpy or scipy input (numpy output); ``one``: a single 1-D histogram.
    """

    rows: Rows
    totals: np.ndarray
    numpy: bool
    one: bool


def read_hists(hists: Any, name: str, trees: SupportTrees, total: float | None) -> Query:
    """Read and check histograms on the trees' support; ``total`` the mass every row must have.

    Raises ``TypeError`` for another type, dtype or (torch) device class, ``ValueError``
    for another shape, negative or non-finite values, a zero row, or a row whose total
    differs from ``total`` (or from the first row's when ``total`` is None) by more than
    :func:`tsw.core._validation.mass_rtol` of the trees' dtype, relatively.
    """
    one = isinstance(hists, np.ndarray | Tensor) and hists.ndim == 1
    if one:
        hists = hists[None]
    numpy = not isinstance(hists, Tensor)
    r, c, v, k = _triplets(hists, name, trees)
    check_nonnegative(v, name)
    keep = v > 0  # stored zeros of sparse input carry no mass
    r, c, v = r[keep], c[keep], v[keep]
    r_np = r.cpu().numpy()
    c_np = c.cpu().numpy().astype(np.int64)
    v_np = v.detach().cpu().to(torch.float64).numpy()
    order = np.lexsort((c_np, r_np))  # row-major, columns sorted (torch nonzero already is)
    r_np, c_np, v_np = r_np[order], c_np[order], v_np[order]
    counts = np.bincount(r_np, minlength=k)
    totals = np.bincount(r_np, weights=v_np, minlength=k)
    if (counts == 0).any():
        i = int(np.flatnonzero(counts == 0)[0])
        raise ValueError(f"{name} must have no zero row (a histogram of no mass); got row {i}")
    ref, ref_name = (totals[0], f"{name} row 0") if total is None else (total, "the index's")
    gap = np.abs(totals - ref) > mass_rtol(trees.dtype) * np.maximum(totals, ref)
    if gap.any():
        i = int(np.flatnonzero(gap)[0])
        raise ValueError(
            f"{name} must have equal total masses (W1 moves all of one histogram onto the "
            f"other; normalise the rows, e.g. h / h.sum(-1, keepdims=True)): {name} row {i} "
            f"has total {totals[i]:.10g}, {ref_name} total is {ref:.10g}"
        )
    indptr = np.zeros(k + 1, np.int64)
    np.cumsum(counts, out=indptr[1:])
    return Query(Rows(indptr, c_np, v_np), totals, numpy, one)
