"""
Trees built from the data
=========================

The tree-sliced Wasserstein distance of Le et al. (2019) on trees built from the data: a
random-shift quadtree and a farthest-point clustering tree over a 2-D point cloud, the
distance between two clouds as one cloud moves away (beside the exact :math:`W_1` of
:mod:`tsw.metrics`), and a matrix of distances between histograms on one support.
"""

import matplotlib.pyplot as plt
import torch

import tsw

torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)
X = torch.randn(150, 2, generator=g, dtype=torch.float64)
Y = 0.6 * torch.randn(120, 2, generator=g, dtype=torch.float64)

# %%
# The distance as the second cloud moves: the quadtree value bounds W_1 from above (its
# edges are as long as its cells' diameters); the clustering tree follows the data.
shifts = torch.linspace(0.0, 4.0, 9, dtype=torch.float64)
quad, cluster, exact = [], [], []
for s in shifts:
    Ys = Y + torch.tensor([s, 0.0], dtype=torch.float64)
    quad.append(float(tsw.support_tsw(X, Ys, n_trees=10, seed=0)))
    cluster.append(float(tsw.support_tsw(X, Ys, tree="cluster", n_trees=10, seed=0)))
    exact.append(tsw.metrics.wasserstein(X, Ys, p=1))

# %%
# One tree of each kind over X: edges from each node to its parent.
quadtree = tsw.sample_quadtrees(X, seed=1)[0]
ctree = tsw.sample_cluster_trees(X, n_clusters=4, depth=3, seed=1)[0]

fig, axes = plt.subplots(1, 3, figsize=(12, 4))
axes[0].plot(shifts, quad, "o-", label="TSW, quadtrees")
axes[0].plot(shifts, cluster, "s-", label="TSW, clustering trees")
axes[0].plot(shifts, exact, "k--", label="exact W_1")
axes[0].set_xlabel("shift of the second cloud")
axes[0].legend()
panels = ((axes[1], quadtree, "quadtree: leaf cells"), (axes[2], ctree, "clustering tree"))
for ax, tree, title in panels:
    ax.scatter(*X.T, s=5, c="k")
    if tree.centers is not None:
        C = tree.centers
        for v in range(1, tree.n_nodes):
            p = int(tree.parents[v])
            ax.plot([C[v, 0], C[p, 0]], [C[v, 1], C[p, 1]], lw=0.5, c="C0")
    else:  # the leaf cell of each point, a square of side side / 2**depth
        for v in tree.leaves.unique().tolist():
            side = float(tree.side) * 0.5 ** int(tree.depth[v])
            x = X[tree.leaves == v][0]
            corner = tree.origin + side * torch.floor((x - tree.origin) / side)
            ax.add_patch(plt.Rectangle(corner.tolist(), side, side, fill=False, lw=0.3))
    ax.set_title(title)
    ax.set_aspect("equal")

# %%
# Histograms on one support: the whole matrix from the trees' L1 embedding.
support = torch.cat([X, Y])
H = torch.rand(6, len(support), generator=g, dtype=torch.float64)
H = H / H.sum(1, keepdim=True)
trees = tsw.sample_cluster_trees(support, n_trees=10, seed=0)
D = tsw.pairwise_tsw(H, trees=trees)
Z = tsw.tree_embedding(H, trees)
print(D)
print("L1 of the embeddings equals the matrix:", bool(torch.allclose(torch.cdist(Z, Z, p=1), D)))
plt.show()
