"""Self-supervised features on the sphere: alignment + a uniformity term, on 8x8 digits.

A small MLP encoder (64 pixels -> ``--hidden`` -> ``--hidden`` ReLU backbone, the
"encoded" features h, then a linear head to ``--feat-dim`` coordinates, L2-normalised:
the "projected" features z on S^(feat-dim - 1)) trains on two random views of every
image of the fixed digits split (``benchmarks._digits``: 1,437 train / 360 test). A view
is a random crop (zoom in by up to ``--crop``), a random shift (up to ``--shift``
pixels), both by one bilinear resampling with zero padding, then Gaussian pixel noise
(std ``--noise``), clipped to [0, 1]. The loss of a batch of views z_A, z_B is

    mean_i |z_A,i - z_B,i|^2  +  weight * (U(z_A) + U(z_B)) / 2

(the alignment of Wang & Isola 2020 with alpha = 2, plus the uniformity term U; the two
views share one draw of trees / directions / rotations). Methods (``--methods``):

* ``wang-isola``: U(z) = log mean_{i<j} exp(-t |z_i - z_j|^2), t = ``--t`` (2), the
  Gaussian-potential uniformity of Wang & Isola (2020), written here
  (:func:`wang_isola_uniformity`);
* ``stsw``: ``tsw.nn.STSWUnifLoss`` (STSW to the uniform measure, the uniform side in
  closed form), ``--stsw-trees`` x ``--stsw-lines``, ``--stsw-p``, ``--stsw-delta``;
* ``ssw``: ``tsw.nn.SSWUnifLoss`` (SSW_2 to uniform, exact per great circle),
  ``--ssw-projections`` circles;
* ``s3w`` / ``ri-s3w``: ``tsw.nn.S3WUnifLoss`` (S3W_2 / RI-S3W_2 against ``--s3w-samples``
  fresh uniform points), ``--s3w-projections`` directions; RI-S3W with ``--ri-rotations``
  rotations of ``--s3w-projections / --ri-rotations`` directions each, so that both
  sort as many projections per step;
* ``align``: alignment only (weight 0), the collapse reference.

``--form power`` trains on ``value ** p`` of the OT terms (STSW's ``--stsw-p``, 2 for SSW
and S3W) in place of the distance itself (the default ``root``).

Metrics, on the frozen encoder: the linear-probe accuracy on the 360 test images of a
logistic regression (scikit-learn, standardised features) fitted on the clean training
images, on z (``probe_accuracy``) and on h (``probe_accuracy_encoded``); Wang & Isola's
uniformity (t = 2) of the clean test features z and their alignment (alpha = 2) between
two fixed random views of each test image (the same views for every run); the effective
rank of the test features z (:func:`effective_rank`, a collapse diagnostic); seconds of
training and s/step. Reference rows: the randomly initialised encoder of each seed
(``untrained``: the starting point of that seed's runs) and the raw pixels (``pixels``;
its uniformity and alignment are those of the L2-normalised pixel vectors).

``--weights`` sweeps the uniformity weight (the same list for every method); without
it, every method runs at its default weight (``DEFAULT_WEIGHTS``, chosen from the sweep
in benchmarks/results/ssl.md). Outputs under ``--out``: ``results.json`` (one record per
method, weight and seed), ``results.csv`` (mean and std per method and weight, numeric
columns), ``probe_vs_weight.png`` and, for ``--feat-dim 3``, ``features_s2.png`` (test
features of seed 0 coloured by class). After the runs (unless ``--timing-rounds 0``):
``step_times.csv/json``, one training step of each method timed side by side
(interleaved rounds; the per-run s/step suffer from whatever else shares the machine),
and ``grad_scale.csv/json``, the gradient norm of the alignment and of each uniformity
term at the untrained encoder's features (why one weight does not fit every term);
``--timing-only`` skips the training. ``--merge DIR,DIR,...`` re-reports the
``results.json`` of earlier runs as one table and plot (runs that differ in feature
dimension, steps or learning rate stay apart and are tagged).

Device and scale: ``--device cuda`` moves the data, the encoder and the losses (their
random draws stay on CPU generators, so a seed gives the same run on every device);
``--batch-size`` and ``--eval-batch-size`` set the training and encoding batches.

Examples: ``python -m benchmarks.ssl`` (default run, about 6 minutes on one shared CPU
core), ``python -m benchmarks.ssl --methods ssw --weights 0.01,0.1,1,10,100`` (a sweep),
``python -m benchmarks.ssl --feat-dim 3 --seeds 1`` (features on S^2),
``python -m benchmarks.ssl --smoke`` (under a minute; what the tests run).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor, nn

import tsw
from benchmarks._digits import SIDE, load_digits_split
from benchmarks._report import (
    add_run_args,
    mean_std,
    prepare,
    print_table,
    progress,
    write_results,
)
from benchmarks._timing import interleaved, median, ratio

#: default uniformity weight of each method (see the sweep in benchmarks/results/ssl.md)
DEFAULT_WEIGHTS = {
    "align": 0.0,
    "wang-isola": 1.0,
    "stsw": 10.0,
    "ssw": 10.0,
    "s3w": 10.0,
    "ri-s3w": 10.0,
}
ALL_METHODS = ",".join(DEFAULT_WEIGHTS)
TEST_VIEW_SEED = 10_000


# --------------------------------------------------------------------------- measures


def wang_isola_uniformity(z: Tensor, t: float = 2.0) -> Tensor:
    """``log mean_{i<j} exp(-t |z_i - z_j|^2)`` over distinct pairs (Wang & Isola 2020).

    Lower is more uniform; on the unit sphere it lies in [-4 t, 0]. Computed with
    ``logsumexp`` from the Gram matrix (no (N, N, D) tensor); ``z`` is (N, D), N >= 2.
    """
    sq_norms = (z * z).sum(1)
    sq = (sq_norms[:, None] + sq_norms[None, :] - 2 * z @ z.T).clamp_min(0)
    i, j = torch.triu_indices(len(z), len(z), offset=1, device=z.device)
    return torch.logsumexp(-t * sq[i, j], dim=0) - math.log(len(i))


def effective_rank(z: Tensor) -> float:
    """``exp`` of the entropy of the normalised squared singular values of centred ``z``.

    Between 1 (features on a line) and ``z.shape[1]``: a collapse diagnostic.
    """
    s2 = torch.linalg.svdvals(z - z.mean(0)).pow(2)
    q = s2 / s2.sum()
    return float(torch.exp(-(q * torch.log(q.clamp_min(1e-300))).sum()))


def wang_isola_alignment(z1: Tensor, z2: Tensor, alpha: float = 2.0) -> Tensor:
    """``mean_i |z1_i - z2_i|^alpha`` over positive pairs (Wang & Isola 2020)."""
    sq = (z1 - z2).pow(2).sum(1)
    return sq.mean() if alpha == 2 else sq.pow(alpha / 2).mean()


# --------------------------------------------------------------------------- model, data


class Encoder(nn.Module):
    """MLP backbone (encoded features h) and a linear head onto the unit sphere (z)."""

    def __init__(self, hidden: int, feat_dim: int, n_in: int = SIDE * SIDE):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        self.head = nn.Linear(hidden, feat_dim)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        h = self.backbone(x)
        return h, F.normalize(self.head(h), dim=1)


def augment(x: Tensor, g: torch.Generator, *, crop: float, shift: float, noise: float) -> Tensor:
    """A random view of each flattened 8x8 image: crop + shift (one resampling), noise.

    The random numbers come from ``g`` (a CPU generator) and are moved to ``x``'s
    device, so a seed gives the same views on every device.
    """
    B = x.shape[0]
    scale = 1 - crop * torch.rand(B, generator=g)  # < 1: zoom into a smaller window
    offset = (2 * torch.rand(B, 2, generator=g) - 1) * (2 * shift / SIDE)  # pixels -> [-1, 1]
    eps = torch.randn(B, SIDE * SIDE, generator=g)
    theta = torch.zeros(B, 2, 3)
    theta[:, 0, 0] = theta[:, 1, 1] = scale
    theta[:, :, 2] = offset
    theta, eps = theta.to(x), eps.to(x)
    grid = F.affine_grid(theta, [B, 1, SIDE, SIDE], align_corners=False)
    img = F.grid_sample(x.view(B, 1, SIDE, SIDE), grid, padding_mode="zeros", align_corners=False)
    return (img.view(B, -1) + noise * eps).clamp(0, 1)


# --------------------------------------------------------------------------- methods


def uniformity_terms(args, seed: int) -> dict[str, dict]:
    """Display name and loss (on a (2, N, D) stack of the two views) of every method."""
    T, k, L = args.stsw_trees, args.stsw_lines, args.s3w_projections
    R = args.ri_rotations
    common = {"validate": False, "reduction": "mean"}
    power = args.form == "power"

    def ot(module, p):
        return (lambda Z: module(Z) ** p) if power else module

    stsw_mod = tsw.nn.STSWUnifLoss(
        n_trees=T, n_lines=k, p=args.stsw_p, delta=args.stsw_delta, seed=1_000 + seed, **common
    )
    ssw_mod = tsw.nn.SSWUnifLoss(n_projections=args.ssw_projections, seed=2_000 + seed, **common)
    s3w_mod = tsw.nn.S3WUnifLoss(
        n_samples=args.s3w_samples, n_projections=L, seed=3_000 + seed, **common
    )
    ri_mod = tsw.nn.S3WUnifLoss(
        n_samples=args.s3w_samples,
        n_projections=max(L // R, 1),
        n_rotations=R,
        seed=4_000 + seed,
        **common,
    )
    form = " power" if power else ""
    return {
        "align": {"name": "alignment only", "loss": None},
        "wang-isola": {
            "name": f"Wang-Isola (t={args.t:g})",
            "loss": lambda Z: (
                (wang_isola_uniformity(Z[0], args.t) + wang_isola_uniformity(Z[1], args.t)) / 2
            ),
        },
        "stsw": {
            "name": f"STSW{form} ({T}x{k}, p={args.stsw_p:g}, delta={args.stsw_delta:g})",
            "loss": ot(stsw_mod, args.stsw_p),
        },
        "ssw": {
            "name": f"SSW_2{form} (L={args.ssw_projections})",
            "loss": ot(ssw_mod, 2),
        },
        "s3w": {"name": f"S3W_2{form} (L={L})", "loss": ot(s3w_mod, 2)},
        "ri-s3w": {
            "name": f"RI-S3W_2{form} ({R} rot. x {max(L // R, 1)})",
            "loss": ot(ri_mod, 2),
        },
    }


# --------------------------------------------------------------------------- evaluation


@torch.no_grad()
def encode(model: Encoder, X: Tensor, batch: int) -> tuple[Tensor, Tensor]:
    hs, zs = zip(*(model(X[i : i + batch]) for i in range(0, len(X), batch)), strict=True)
    return torch.cat(hs), torch.cat(zs)


def linear_probe(F_train: Tensor, y_train: Tensor, F_test: Tensor, y_test: Tensor) -> float:
    """Test accuracy of a logistic regression on standardised frozen features."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    clf.fit(F_train.double().cpu().numpy(), y_train.cpu().numpy())
    return float(clf.score(F_test.double().cpu().numpy(), y_test.cpu().numpy()))


def evaluate(model: Encoder, data, views: tuple[Tensor, Tensor], batch: int) -> dict:
    model.eval()
    h_tr, z_tr = encode(model, data.X_train, batch)
    h_te, z_te = encode(model, data.X_test, batch)
    z_a, z_b = (encode(model, v, batch)[1] for v in views)
    model.train()
    return {
        "probe_accuracy": linear_probe(z_tr, data.y_train, z_te, data.y_test),
        "probe_accuracy_encoded": linear_probe(h_tr, data.y_train, h_te, data.y_test),
        "uniformity": float(wang_isola_uniformity(z_te.double())),
        "alignment": float(wang_isola_alignment(z_a.double(), z_b.double())),
        "effective_rank": effective_rank(z_te.double()),
        "z_test": z_te.cpu(),
    }


def pixel_reference(data, views) -> dict:
    u = lambda x: F.normalize(x.double(), dim=1)  # noqa: E731
    return {
        "probe_accuracy": linear_probe(data.X_train, data.y_train, data.X_test, data.y_test),
        "probe_accuracy_encoded": float("nan"),
        "uniformity": float(wang_isola_uniformity(u(data.X_test))),
        "alignment": float(wang_isola_alignment(u(views[0]), u(views[1]))),
        "effective_rank": effective_rank(u(data.X_test)),
    }


# --------------------------------------------------------------------------- training


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train(args, key: str, weight: float, seed: int, data, views) -> dict:
    device = data.X_train.device
    torch.manual_seed(seed)  # the encoder's initialisation (the "untrained" row of this seed)
    model = Encoder(args.hidden, args.feat_dim).to(device)
    term = uniformity_terms(args, seed)[key]["loss"]
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    g = torch.Generator().manual_seed(5_000 + seed)  # batches and views
    n = len(data.X_train)
    order, pos = torch.randperm(n, generator=g), 0
    elapsed = 0.0
    losses = []
    for _ in range(args.steps):
        if pos + args.batch_size > n:
            order, pos = torch.randperm(n, generator=g), 0
        idx = order[pos : pos + args.batch_size].to(device)
        pos += args.batch_size
        sync(device)
        t0 = time.perf_counter()
        x = data.X_train[idx]
        aug = {"crop": args.crop, "shift": args.shift, "noise": args.noise}
        _, z_a = model(augment(x, g, **aug))
        _, z_b = model(augment(x, g, **aug))
        loss = wang_isola_alignment(z_a, z_b)
        if term is not None and weight != 0:
            loss = loss + weight * term(torch.stack([z_a, z_b]))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sync(device)
        elapsed += time.perf_counter() - t0
        losses.append(float(loss.detach()))
    metrics = evaluate(model, data, views, args.eval_batch_size)
    return {
        "seconds": elapsed,
        "s_per_step": elapsed / args.steps,
        "final_loss": statistics.mean(losses[-10:]),
        **metrics,
    }


def step_closure(args, key: str, weight: float, data):
    """One training step of ``key`` (views, loss, backward, Adam), for side-by-side timing."""
    device = data.X_train.device
    torch.manual_seed(0)
    model = Encoder(args.hidden, args.feat_dim).to(device)
    term = uniformity_terms(args, 0)[key]["loss"]
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    g = torch.Generator().manual_seed(0)
    x = data.X_train[: args.batch_size]
    aug = {"crop": args.crop, "shift": args.shift, "noise": args.noise}

    def step():
        _, z_a = model(augment(x, g, **aug))
        _, z_b = model(augment(x, g, **aug))
        loss = wang_isola_alignment(z_a, z_b)
        if term is not None:
            loss = loss + weight * term(torch.stack([z_a, z_b]))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sync(device)

    return step


def step_timing(args, keys: list[str], data, out) -> None:
    """Interleaved rounds of one step per method: median s/step and ratio to Wang-Isola."""
    fns = {key: step_closure(args, key, 1.0, data) for key in keys}
    times = interleaved(fns, rounds=args.timing_rounds)
    names = {k: v["name"] for k, v in uniformity_terms(args, 0).items()}
    ref = "wang-isola" if "wang-isola" in keys else keys[0]
    rows = [[names[k], f"{median(times[k]):.4f}", f"{ratio(times, k, ref):.2f}"] for k in keys]
    header = ["method", "s/step (median)", f"/ {names[ref]}"]
    print_table(
        f"time per training step, {args.timing_rounds} interleaved rounds "
        f"(batch {args.batch_size}, {args.threads} thread(s), device {args.device})",
        header,
        rows,
    )
    payload = {"settings": {"rounds": args.timing_rounds, "reference": ref}, "times": times}
    write_results(out, "step_times", header, rows, payload)


def gradient_scales(args, keys: list[str], data, out, repeats: int = 5) -> None:
    """Gradient norms of each term at the untrained encoder's features (seed 0).

    For one batch of view pairs of the initial encoder: the norm of the gradient of the
    alignment and of each uniformity term with respect to the stacked features (2, N, D),
    tangential part only (normalisation removes the radial one), mean of ``repeats``
    draws of trees / directions. Weight 1 balances the terms only if these are alike.
    """
    torch.manual_seed(0)
    model = Encoder(args.hidden, args.feat_dim).to(data.X_train.device)
    g = torch.Generator().manual_seed(0)
    x = data.X_train[: args.batch_size]
    aug = {"crop": args.crop, "shift": args.shift, "noise": args.noise}
    with torch.no_grad():
        Z0 = torch.stack([model(augment(x, g, **aug))[1] for _ in range(2)])
    terms = uniformity_terms(args, 0)

    def tangential_grad(fn):
        Z = Z0.clone().requires_grad_(True)
        value = fn(Z)
        (grad,) = torch.autograd.grad(value, Z)
        grad = grad - (grad * Z0).sum(-1, keepdim=True) * Z0
        return float(value.detach()), float(grad.norm())

    rows, payload = [], {}
    for key in ["align", *[k for k in keys if k != "align"]]:
        fn = (lambda Z: wang_isola_alignment(Z[0], Z[1])) if key == "align" else terms[key]["loss"]
        vals, norms = zip(*(tangential_grad(fn) for _ in range(repeats)), strict=True)
        payload[key] = {"value": statistics.mean(vals), "grad_norm": statistics.mean(norms)}
        label = "alignment (mean |z_A - z_B|^2)" if key == "align" else terms[key]["name"]
        rows.append(
            [
                label,
                f"{payload[key]['value']:+.4f}",
                f"{payload[key]['grad_norm']:.4f}",
            ]
        )
    header = ["term", "value", "|tangential gradient|"]
    print_table(
        f"each term at the untrained encoder's features (seed 0, {args.batch_size} pairs, "
        f"mean of {repeats} draws)",
        header,
        rows,
    )
    write_results(out, "grad_scale", header, rows, payload)


def untrained(args, seed: int, data, views) -> dict:
    torch.manual_seed(seed)
    model = Encoder(args.hidden, args.feat_dim).to(data.X_train.device)
    return {"seconds": 0.0, "s_per_step": 0.0, **evaluate(model, data, views, args.eval_batch_size)}


# --------------------------------------------------------------------------- output


METRICS = [
    "probe_accuracy",
    "probe_accuracy_encoded",
    "uniformity",
    "alignment",
    "effective_rank",
    "s_per_step",
]


SETUP = ("feat_dim", "steps", "lr")
DEFAULTS = {"feat_dim": 10, "steps": 300, "lr": 1e-3}


def setup_key(r: dict) -> tuple:
    """What tells runs apart besides the weight and the seed: method, name, feat_dim, steps, lr."""
    return (r["method"], r["name"], *(r.get(k) for k in SETUP))


def summarise(records: list[dict]) -> list[dict]:
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault((*setup_key(r), r["weight"]), []).append(r)
    rows = []
    for (method, name, *setup, weight), rs in groups.items():
        tags = [
            f"{k} {v:g}" for k, v in zip(SETUP, setup, strict=True) if v not in (None, DEFAULTS[k])
        ]
        name = f"{name} [{', '.join(tags)}]" if tags else name
        row = {"method": method, "name": name, "weight": weight, "n_seeds": len(rs)}
        for m in METRICS:
            vals = [math.nan if r.get(m) is None else r[m] for r in rs]
            if any(math.isnan(v) for v in vals):  # not measured (older runs) or undefined
                row[f"{m}_mean"] = row[f"{m}_std"] = math.nan
            else:
                row[f"{m}_mean"] = statistics.mean(vals)
                row[f"{m}_std"] = statistics.pstdev(vals) if len(vals) > 1 else 0.0
            row[f"_{m}"] = vals
        rows.append(row)
    return rows


def plot_sweep(summary: list[dict], path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    refs = {"untrained": ":", "pixels": "--", "align": "-."}
    for method, style in refs.items():
        for r in (r for r in summary if r["method"] == method):
            ax.axhline(100 * r["probe_accuracy_mean"], ls=style, color="0.4", lw=1)
            ax.annotate(
                r["name"],
                (0, 100 * r["probe_accuracy_mean"]),
                xycoords=("axes fraction", "data"),
                fontsize=7,
                color="0.3",
                va="bottom",
            )
    trained = {}
    for r in summary:
        if r["method"] not in refs:
            trained.setdefault(r["name"], []).append(r)
    for name, rs in trained.items():
        rs.sort(key=lambda r: r["weight"])
        ax.errorbar(
            [r["weight"] for r in rs],
            [100 * r["probe_accuracy_mean"] for r in rs],
            yerr=[100 * r["probe_accuracy_std"] for r in rs],
            fmt="o-",
            capsize=3,
            label=name,
        )
    ax.set_xscale("log")
    ax.set_xlabel("uniformity weight")
    ax.set_ylabel("linear-probe test accuracy on z (%)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_sphere(panels: dict[str, Tensor], labels: Tensor, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(len(panels), 4)
    rows = math.ceil(len(panels) / cols)
    fig = plt.figure(figsize=(3.2 * cols, 3.2 * rows))
    for i, (title, Z) in enumerate(panels.items()):
        ax = fig.add_subplot(rows, cols, i + 1, projection="3d")
        ax.scatter(*Z.T.numpy(), c=labels.numpy(), cmap="tab10", s=4, vmin=0, vmax=9)
        ax.set_box_aspect((1, 1, 1))
        ax.set_axis_off()
        ax.set_title(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(records: list[dict], out, title: str, plot_title: str) -> list[dict]:
    """Print the summary table; write results.json / results.csv and the weight plot."""
    summary = summarise(records)
    header = ["method", "weight", "probe z (%)", "probe h (%)", "uniformity", "alignment"]
    header += ["eff. rank", "s/step"]
    rows = []
    for r in summary:

        def fmt(m, spec, r=r, scale=1.0):
            if math.isnan(r[f"{m}_mean"]):
                return "-"
            return mean_std([scale * v for v in r[f"_{m}"]], spec, spec)

        rows.append(
            [
                r["name"],
                "-" if r["weight"] is None else f"{r['weight']:g}",
                fmt("probe_accuracy", ".1f", scale=100),
                fmt("probe_accuracy_encoded", ".1f", scale=100),
                fmt("uniformity", ".3f"),
                fmt("alignment", ".3f"),
                fmt("effective_rank", ".2f"),
                f"{statistics.median(r['_s_per_step']):.4f}",
            ]
        )
    print_table(title, header, rows)
    csv_header = ["method", "name", "weight", "n_seeds"]
    csv_header += [f"{m}_{s}" for m in METRICS for s in ("mean", "std")]
    csv_rows = [
        [r["method"], r["name"], math.nan if r["weight"] is None else r["weight"], r["n_seeds"]]
        + [r[f"{m}_{s}"] for m in METRICS for s in ("mean", "std")]
        for r in summary
    ]
    clean = [
        {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
        for r in records
    ]
    write_results(out, "results", csv_header, csv_rows, clean)
    plot_sweep(summary, out / "probe_vs_weight.png", title=plot_title)
    return summary


def merge(dirs: list[str], out) -> int:
    """Re-report the records of several earlier runs (e.g. one sweep per method) as one."""
    records, seen = [], set()
    for d in dirs:
        for r in json.loads((Path(d) / "results.json").read_text()):
            key = (*setup_key(r), r["weight"], r["seed"])
            if key not in seen:  # the reference rows are repeated in every run
                seen.add(key)
                records.append(r)
    report(records, out, f"merged from {', '.join(dirs)}", "digits SSL (merged runs)")
    print(f"\nresults written to {Path(out).resolve()}")
    return 0


# --------------------------------------------------------------------------- main


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--methods", default=ALL_METHODS, help=f"comma list from {ALL_METHODS}")
    ap.add_argument("--weights", default=None, help="comma list: sweep (default: per method)")
    ap.add_argument(
        "--feat-dim", type=int, default=DEFAULTS["feat_dim"], help="z lies on S^(feat-dim - 1)"
    )
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--steps", type=int, default=DEFAULTS["steps"])
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--eval-batch-size", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=DEFAULTS["lr"], help="Adam learning rate")
    ap.add_argument("--crop", type=float, default=0.25, help="max zoom-in fraction")
    ap.add_argument("--shift", type=float, default=1.0, help="max shift in pixels")
    ap.add_argument("--noise", type=float, default=0.1, help="pixel noise std")
    ap.add_argument("--t", type=float, default=2.0, help="Wang-Isola temperature")
    ap.add_argument("--stsw-trees", type=int, default=200)
    ap.add_argument("--stsw-lines", type=int, default=5)
    ap.add_argument("--stsw-p", type=float, default=2.0)
    ap.add_argument("--stsw-delta", type=float, default=2.0)
    ap.add_argument("--ssw-projections", type=int, default=200)
    ap.add_argument("--s3w-projections", type=int, default=200)
    ap.add_argument("--s3w-samples", type=int, default=None, help="default: --batch-size")
    ap.add_argument("--ri-rotations", type=int, default=5)
    ap.add_argument("--form", choices=["root", "power"], default="root")
    ap.add_argument("--device", default="cpu", help="torch device, e.g. cuda")
    ap.add_argument(
        "--timing-rounds", type=int, default=7, help="side-by-side step timing (0: skip)"
    )
    ap.add_argument(
        "--timing-only", action="store_true", help="only the step timing and gradient scales"
    )
    ap.add_argument("--merge", default=None, help="comma list of output folders to re-report")
    ap.add_argument("--smoke", action="store_true", help="tiny settings (under a minute)")
    add_run_args(ap, "ssl")
    args = ap.parse_args(argv)
    if args.smoke:
        args.steps, args.batch_size, args.seeds, args.feat_dim, args.hidden = 10, 64, 1, 3, 32
        args.stsw_trees, args.stsw_lines = 10, 3
        args.ssw_projections = args.s3w_projections = 10
        args.s3w_samples, args.ri_rotations, args.timing_rounds = 64, 2, 1
    if args.s3w_samples is None:  # as the official code: as many uniform points as data
        args.s3w_samples = args.batch_size
    keys = [k.strip() for k in args.methods.split(",") if k.strip()]
    bad = [k for k in keys if k not in DEFAULT_WEIGHTS]
    if bad:
        ap.error(f"unknown methods {bad}; choose from {ALL_METHODS}")
    return args, keys


def main(argv: list[str] | None = None) -> int:
    args, keys = parse_args(argv)
    out = prepare(args)
    if args.merge:
        return merge([d for d in args.merge.split(",") if d], out)
    device = torch.device(args.device)
    d = load_digits_split()
    data = type(d)(*(t.to(device) for t in d))
    gv = torch.Generator().manual_seed(TEST_VIEW_SEED)
    aug = {"crop": args.crop, "shift": args.shift, "noise": args.noise}
    views = (augment(data.X_test, gv, **aug), augment(data.X_test, gv, **aug))
    sweep = None if args.weights is None else [float(w) for w in args.weights.split(",")]
    names = {k: v["name"] for k, v in uniformity_terms(args, 0).items()}
    settings = vars(args) | {
        "methods": keys,
        "weights": sweep or {k: DEFAULT_WEIGHTS[k] for k in keys},
        "names": names,
        "train/test": f"{len(data.X_train)}/{len(data.X_test)}",
        "torch_threads": torch.get_num_threads(),
    }
    print(f"settings: {settings}")
    if args.timing_only:
        step_timing(args, keys, data, out)
        gradient_scales(args, keys, data, out)
        return 0

    jobs = []
    for key in keys:
        weights = [0.0] if key == "align" else (sweep or [DEFAULT_WEIGHTS[key]])
        jobs += [(key, w, s) for w in weights for s in range(args.seeds)]
    jobs = [("untrained", None, s) for s in range(args.seeds)] + jobs

    records, features = [], {}
    rec = {"method": "pixels", "name": "raw pixels (64)", "weight": None, "seed": 0}
    records.append(rec | {"seconds": 0.0, "s_per_step": 0.0, **pixel_reference(data, views)})
    for key, w, seed in progress(jobs, "ssl runs"):
        if key == "untrained":
            run = untrained(args, seed, data, views)
            name = f"untrained encoder (random init, S^{args.feat_dim - 1})"
        else:
            run = train(args, key, w, seed, data, views)
            name = names[key]
        z = run.pop("z_test")
        if seed == 0:
            features[(key, w)] = z
        setup = {"feat_dim": args.feat_dim, "steps": args.steps, "lr": args.lr}
        records.append({"method": key, "name": name, "weight": w, "seed": seed, **setup, **run})

    title = (
        f"digits SSL, z on S^{args.feat_dim - 1}, {args.steps} steps of {args.batch_size} pairs, "
        f"mean ± std over {args.seeds} seed(s); linear probe on z (projected) and h "
        f"(encoded, {args.hidden}); Wang-Isola uniformity (t=2) / alignment on the test set"
    )
    summary = report(records, out, title, f"digits SSL on S^{args.feat_dim - 1}")
    (out / "settings.json").write_text(json.dumps(settings, indent=2, default=str))
    if args.feat_dim == 3:
        panels = {"untrained": features[("untrained", None)]}
        for key in keys:  # the best weight of each method (seed 0's features)
            cands = [r for r in summary if r["method"] == key]
            best = max(cands, key=lambda r: r["probe_accuracy_mean"])
            panels[f"{names[key]}, w={best['weight']:g}"] = features[(key, best["weight"])]
        plot_sphere(panels, data.y_test.cpu(), out / "features_s2.png")
    if args.timing_rounds > 0:
        step_timing(args, keys, data, out)
        gradient_scales(args, keys, data, out)
    print(f"\nresults written to {out.resolve()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
