"""
Distances, a tree system and its split
======================================

Compute the tree-sliced distances between two point clouds, check that TSW-SL with a
uniform split equals SW_1 over the same lines, and draw one tree system with the mass
split of Db-TSW.
"""

import matplotlib.pyplot as plt
import torch

import tsw

torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)
X = torch.randn(300, 2, generator=g)
Y = 0.5 * torch.randn(200, 2, generator=g) + torch.tensor([2.0, 1.0])

print("Db-TSW ", float(tsw.db_tsw(X, Y, n_trees=250, n_lines=4, delta=2.0, seed=0)))
print("TSW-SL ", float(tsw.tsw_sl(X, Y, n_trees=250, n_lines=4, seed=0)))
print("SW_2   ", float(tsw.sw(X, Y, n_projections=1000, seed=0)))
print("exact W_2", tsw.metrics.wasserstein(X, Y))

# %%
# With a point-independent split no mass crosses a root: TSW-SL is SW_1 over its lines.
trees = tsw.sample_concurrent_lines(2, n_trees=100, n_lines=4, seed=1)
directions = trees.directions.reshape(-1, 2).T  # (d, L)
print(float(tsw.tsw_sl(X, Y, trees=trees)), float(tsw.sw(X, Y, projections=directions, p=1)))

# %%
# One tree of three lines; each point is coloured by the line that receives most of its
# mass under the distance-based split ``softmax(-delta * distance to the line)``.
one = tsw.sample_concurrent_lines(
    2, n_trees=1, n_lines=3, center=torch.tensor([1.0, 0.5]), std=0.3, seed=4
)
root, dirs = one.roots[0], one.directions[0]
Z = torch.cat([X, Y])
rel = Z - root
dist = (rel.unsqueeze(1) - (rel @ dirs.T).unsqueeze(-1) * dirs).norm(dim=-1)
alpha = torch.softmax(-4.0 * dist, dim=1)
fig, ax = plt.subplots(figsize=(5, 4.5))
colors = ["tab:red", "tab:blue", "tab:green"]
for line in range(3):
    chosen = alpha.argmax(1) == line
    ax.scatter(*Z[chosen].T, s=8, color=colors[line])
    ax.plot(*(root + torch.tensor([-4.0, 4.0])[:, None] * dirs[line]).T, color=colors[line])
ax.scatter(*root, color="k", s=60, zorder=3)
ax.set(xlim=(-3.5, 4), ylim=(-3, 3.5), aspect="equal", title="Db-TSW split, delta = 4")
plt.show()
