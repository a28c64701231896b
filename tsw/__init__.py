"""tsw: tree-sliced optimal transport distances in PyTorch."""

from tsw.db_tsw import db_tsw
from tsw.tree_wasserstein import tree_wasserstein
from tsw.trees import (
    ChainLines,
    ConcurrentLines,
    sample_chain_lines,
    sample_concurrent_lines,
)
from tsw.tsw_sl import tsw_sl

__version__ = "0.1.0"

__all__ = [
    "ChainLines",
    "ConcurrentLines",
    "__version__",
    "db_tsw",
    "sample_chain_lines",
    "sample_concurrent_lines",
    "tree_wasserstein",
    "tsw_sl",
]
