"""Charts of the analysis tools."""
import os
import os.path as osp


def plot_sweep(stats: dict, xlabel: str, ylabel: str, path: str):
    """One line per model over a sweep (a transformation's values), with a
    band of one standard deviation over seeds; written to ``path`` (PNG).

    Args:
        stats: ``{label: {value: {'mean': m, 'std': s}}}``, values in the
            order to draw (numbers, or strings of numbers).
    """
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5, 3.4))
    for label, per_value in stats.items():
        xs = [float(v) for v in per_value]
        means = [s['mean'] for s in per_value.values()]
        stds = [s['std'] for s in per_value.values()]
        ax.plot(xs, means, marker='o', label=label)
        ax.fill_between(xs, [m - s for m, s in zip(means, stds)],
                        [m + s for m, s in zip(means, stds)], alpha=0.2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
