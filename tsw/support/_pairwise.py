r"""L1 distance matrices between sparse non-negative embeddings: dense columns and sparse ones.

The tree embeddings of histograms with few support points are sparse, and most of
their columns (the deep edges: a few support points below each) are nonzero for few
histograms. For non-negative ``x`` and ``y``,

.. math::

    \lVert x - y \rVert_1 = \lVert x \rVert_1 + \lVert y \rVert_1
        - 2 \sum_e \min(x_e, y_e),

and the sum of minima over a column ``e`` only involves the pairs of histograms that are
both nonzero there: ``nnz_s(e) nnz_t(e)`` pairs instead of ``k m``. Each column goes one
way or the other by a cost model: pair by pair (an inverted index of the column's
nonzero rows, the minima scattered into the matrix in chunks of pairs) when
``nnz_s(e) nnz_t(e) < SPARSE_SHARE k m``, else with the dense columns through blocked
``torch.cdist(p=1)``. The split changes the values only by rounding.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence

import torch
from torch import Tensor

from tsw.core._progress import Progress

__all__ = ["Inverted", "add_minima", "invert", "l1_matrix"]

#: a column is summed pair by pair when its pairs of nonzeros are fewer than this share of
#: all pairs: the measured cost of one pair (gathers, minimum, scatter: about 7 ns on one
#: CPU core, float64) against one entry of ``torch.cdist(p=1)`` in chunks of
#: ``DENSE_COLUMNS`` columns (about 0.2 ns); the (2000, 2000) matrix of 100-word documents
#: on 5000 points took 4.1 s at 0.03, 4.1 s at 0.05, 4.2 s at 0.015 and 4.7 s at 0.07
SPARSE_SHARE = 0.03

#: columns of the dense part per call of ``torch.cdist``
DENSE_COLUMNS = 32

#: the nonzeros of the embeddings kept from their first computation, in bytes a set (24
#: bytes each in float64); beyond, each block is embedded again when it is needed
KEEP_BYTES = 2**29

#: pairs of nonzeros enumerated at once (about 48 bytes of working memory each)
PAIR_CHUNK = 2**20

Block = tuple[int, int]  # (first row, rows)
Entries = tuple[Tensor, Tensor, Tensor]  # rows, columns, values


class _Nonzeros:
    """Each block's nonzeros (rows within the block, columns, values; row-major).

    ``embed(b)`` returns them for block ``b`` (never a dense embedding). Kept from the
    first embedding of the blocks while they take at most ``KEEP_BYTES``, else the block
    is embedded again when asked for. ``counts``: the number of rows with a nonzero in
    each column, (E,) int64. ``bar`` counts the blocks embedded.
    """

    def __init__(
        self, embed: Callable[[int], Entries], n_blocks: int, E: int, bar: Progress | None = None
    ) -> None:
        self.embed = embed
        self.kept: list[Entries] | None = []
        size = 0
        counts = None
        self.negative = False  # a negative value (validate=False): the identity fails
        for b in range(n_blocks):
            entries = self.of(b)
            if bar is not None:
                bar.update(1)
            self.negative = self.negative or bool((entries[2] < 0).any())
            n_c = torch.bincount(entries[1], minlength=E)
            counts = n_c if counts is None else counts + n_c
            size += entries[0].numel() * (16 + entries[2].element_size())
            if self.kept is not None:
                self.kept.append(entries)
                if size > KEEP_BYTES:
                    self.kept = None
        self.counts: Tensor = counts  # type: ignore[assignment]

    def of(self, b: int) -> Entries:
        """Return the nonzeros of block ``b``, from its embedding."""
        return self.embed(b)

    def __getitem__(self, b: int) -> Entries:
        return self.of(b) if self.kept is None else self.kept[b]


def _select(nz: _Nonzeros, blocks: Sequence[Block], pos: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Return the nonzeros in the columns with ``pos >= 0``: rows, their ``pos``, values."""
    rows, cols, vals = [], [], []
    for b, (lo, _) in enumerate(blocks):
        r, c, v = nz[b]
        p = pos.index_select(0, c)
        keep = p >= 0
        rows.append(r[keep] + lo)
        cols.append(p[keep])
        vals.append(v[keep])
    return torch.cat(rows), torch.cat(cols), torch.cat(vals)


def _dense(entries: Entries, rows: int, pos: Tensor, width: int) -> Tensor:
    """Return the dense (rows, width) block of the columns with ``pos >= 0``, at ``pos``."""
    r, c, v = entries
    p = pos.index_select(0, c)
    keep = p >= 0
    out = v.new_zeros(rows, width)
    out[r[keep], p[keep]] = v[keep]
    return out


@dataclasses.dataclass(frozen=True)
class Inverted:
    """One side's nonzeros as an inverted index: sorted by column (stably).

    ``rows`` and ``vals`` in column order; ``first`` (C,) the position of each column's
    first nonzero and ``count`` (C,) their number.
    """

    rows: Tensor
    vals: Tensor
    first: Tensor
    count: Tensor

    def __iter__(self) -> Iterator[Tensor]:
        """Iterate over the four tensors (rows, vals, first, count)."""
        return iter((self.rows, self.vals, self.first, self.count))


def invert(t: tuple[Tensor, Tensor, Tensor], C: int) -> Inverted:
    """Return the inverted index of nonzeros ``t`` (rows, columns in [0, C), values)."""
    rt, et, vt = t
    order = torch.argsort(et, stable=True)
    count = torch.bincount(et, minlength=C)
    return Inverted(rt[order], vt[order], torch.cumsum(count, 0) - count, count)


def add_minima(
    out: Tensor,
    s: tuple[Tensor, Tensor, Tensor],
    t: Inverted,
    pair_chunk: int,
    bar: Progress | None = None,
) -> None:
    """Add ``sum_e min(x_e, y_e)`` over the shared nonzeros to ``out`` (k, m), by chunks.

    ``s`` holds the nonzeros (rows, columns, values) of the first side, ``t`` the second
    side's :func:`invert`. For one pair of rows the minima are added in the order of the
    ``s`` nonzeros (one serial ``index_add_``), whatever other rows ``t`` holds. ``bar``
    counts the chunks of ``pair_chunk`` pairs.
    """
    rs, es, vs = s
    m = out.shape[1]
    b = t.count[es]  # pairs of each s nonzero
    keep = b > 0
    rs, es, vs, b = rs[keep], es[keep], vs[keep], b[keep]
    if not b.numel():
        return
    cum = torch.cumsum(b, 0)
    # the t position of the pair numbered p (over all pairs) of s nonzero q: p + base[q]
    base = t.first[es] - (cum - b)
    rowm = rs * m
    flat = out.view(-1)
    chunk = torch.empty(1, dtype=cum.dtype, device=cum.device)
    s0, n_s = 0, b.numel()
    while s0 < n_s:
        p0 = int(cum[s0 - 1]) if s0 else 0
        chunk.fill_(p0 + pair_chunk)
        s1 = max(int(torch.searchsorted(cum, chunk, right=True)), s0 + 1)
        loc = torch.repeat_interleave(b[s0:s1])
        p1 = p0 + loc.numel()
        tidx = torch.arange(p0, p1, device=loc.device) + base[s0:s1].index_select(0, loc)
        dest = rowm[s0:s1].index_select(0, loc) + t.rows.index_select(0, tidx)
        val = torch.minimum(vs[s0:s1].index_select(0, loc), t.vals.index_select(0, tidx))
        flat.index_add_(0, dest, val)
        s0 = s1
        if bar is not None:
            bar.update(1)


def _add_minima(
    out: Tensor,
    s: tuple[Tensor, Tensor, Tensor],
    t: tuple[Tensor, Tensor, Tensor],
    C: int,
    pair_chunk: int,
    bar: Progress | None = None,
) -> None:
    """:func:`add_minima` against the nonzeros ``t`` (rows, columns in [0, C), values)."""
    add_minima(out, s, invert(t, C), pair_chunk, bar)


def _pair_chunks(s: Tensor, t: Tensor, C: int, pair_chunk: int) -> int:
    """About how many chunks :func:`add_minima` takes for the columns ``s`` and ``t``."""
    pairs = int((torch.bincount(s, minlength=C) * torch.bincount(t, minlength=C)).sum())
    return -(-pairs // pair_chunk)


def l1_matrix(
    embed_s: Callable[[int], Entries],
    blocks_s: Sequence[Block],
    embed_t: Callable[[int], Entries] | None,
    blocks_t: Sequence[Block],
    E: int,
    like: Tensor,
    pair_chunk: int | None = None,
    verbose: bool = False,
) -> Tensor:
    """Return the (k, m) L1 distances between the rows of two non-negative embeddings.

    ``embed_s(b)`` returns the nonzeros (rows within the block, columns, values;
    row-major) of the embedding of block ``b`` of ``blocks_s`` (first row, rows);
    ``embed_t`` is None for the distances among the rows of the first set (symmetric,
    zero diagonal). The result has ``like``'s dtype and device. ``pair_chunk`` pairs of
    nonzeros are enumerated at once (default ``PAIR_CHUNK``). ``verbose``: two progress
    bars, the blocks embedded, then the chunks of pairs and the blocks of dense columns.
    """
    same = embed_t is None
    k = blocks_s[-1][0] + blocks_s[-1][1]
    m = blocks_t[-1][0] + blocks_t[-1][1]
    chunk = pair_chunk or PAIR_CHUNK
    n_embed = len(blocks_s) + (0 if same else len(blocks_t))
    with Progress(verbose, n_embed, "pairwise_tsw (embeddings)", unit="block") as bar:
        nz_s = _Nonzeros(embed_s, len(blocks_s), E, bar)
        nz_t = nz_s if embed_t is None else _Nonzeros(embed_t, len(blocks_t), E, bar)
    pairs = nz_s.counts.to(torch.float64) * nz_t.counts.to(torch.float64)
    sparse = pairs < SPARSE_SHARE * k * m
    if nz_s.negative or nz_t.negative:
        sparse[:] = False
    out = like.new_zeros(k, m)
    dense_pairs = (
        len(blocks_s) * (len(blocks_s) + 1) // 2 if same else len(blocks_s) * len(blocks_t)
    )
    work: list[tuple[Tensor, int, tuple | None]] = []  # (pos, columns, sparse nonzeros)
    steps = 0
    for part in (sparse, ~sparse):
        cols = torch.nonzero(part).squeeze(1)
        if not cols.numel():
            continue
        pos = torch.full((E,), -1, dtype=torch.long, device=cols.device)
        pos[cols] = torch.arange(cols.numel(), device=cols.device)
        if part is sparse:
            s = _select(nz_s, blocks_s, pos)
            t = s if same else _select(nz_t, blocks_t, pos)
            work.append((pos, cols.numel(), (s, t)))
            steps += _pair_chunks(s[1], t[1], cols.numel(), chunk) if verbose else 0
        else:
            work.append((pos, cols.numel(), None))
            steps += dense_pairs
    with Progress(verbose, steps, "pairwise_tsw (distances)", unit="step") as bar:
        for pos, C, nonzeros in work:
            if nonzeros is not None:
                s, t = nonzeros
                _add_minima(out, s, t, C, chunk, bar)
                norm_s = like.new_zeros(k).index_add_(0, s[0], s[2])
                norm_t = norm_s if same else like.new_zeros(m).index_add_(0, t[0], t[2])
                out.mul_(-2.0).add_(norm_s[:, None]).add_(norm_t[None, :]).clamp_(min=0.0)
            else:
                _add_dense(out, nz_s, blocks_s, nz_t, blocks_t, pos, C, same, bar)
    if same:  # the lower triangle from the upper one: exactly symmetric on every device
        out = torch.triu(out, 1)
        out = out + out.T
    return out


def _add_dense(
    out: Tensor,
    nz_s: _Nonzeros,
    blocks_s: Sequence[Block],
    nz_t: _Nonzeros,
    blocks_t: Sequence[Block],
    pos: Tensor,
    width: int,
    same: bool,
    bar: Progress | None = None,
) -> None:
    """Add the L1 distances over the columns ``pos >= 0``, block by block (``torch.cdist``).

    ``DENSE_COLUMNS`` columns per ``torch.cdist``: the rows stay in cache (at 2000 columns
    and (2000, 2000) rows, 2.4 times faster than one call on one CPU core).
    """
    for i, (lo_i, k_i) in enumerate(blocks_s):
        Zs = _dense(nz_s[i], k_i, pos, width)
        parts_s = [z.contiguous()[None] for z in Zs.split(DENSE_COLUMNS, dim=1)]
        for j, (lo_j, m_j) in enumerate(blocks_t):
            if same and j < i:
                continue  # the upper triangle only
            if same and j == i:
                parts_t = parts_s
            else:
                Zt = _dense(nz_t[j], m_j, pos, width)
                parts_t = [z.contiguous()[None] for z in Zt.split(DENSE_COLUMNS, dim=1)]
            block = out[lo_i : lo_i + k_i, lo_j : lo_j + m_j]
            for zs, zt in zip(parts_s, parts_t, strict=True):
                block += torch.cdist(zs, zt, p=1)[0]
            if bar is not None:
                bar.update(1)
