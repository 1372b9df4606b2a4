"""A picture of a placement: one column per GPU, grouped by node, coloured by task group.

Rows are the tasks; a filled cell means the task has a tasklet on that GPU. Node names, GPU
types and regions label the x axis. Written with matplotlib's Agg backend (no display).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from distrs.placement.specs import ClusterSpec


def draw(doc: dict[str, Any], cluster: ClusterSpec, path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    devices = []
    for node in cluster.nodes:
        for r in range(node.count):
            devices.append((node.name, node.gpu, node.region, r))
    n = len(devices)
    tasks: list[str] = []
    owner: dict[int, int] = {}
    cells: dict[tuple[str, int], int] = {}
    for gi, g in enumerate(doc["groups"]):
        for d in g["gpus"]:
            owner[int(d)] = gi
        for t in g["tasks"]:
            if t not in tasks:
                tasks.append(t)
            par = g["parallel"].get(t, {})
            for d in par.get("tasklets") or g["gpus"]:
                cells[(t, int(d))] = gi
    colours = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(max(8.0, n * 0.18), 1.2 + 0.45 * (len(tasks) + 1)))
    for d in range(n):
        g_of = owner.get(d)
        ax.add_patch(Rectangle((d, 0), 1, 0.8, color=colours(g_of % 10) if g_of is not None else "#dddddd"))
        for row, t in enumerate(tasks, start=1):
            if (t, d) in cells:
                ax.add_patch(Rectangle((d, row), 1, 0.8, color=colours(cells[(t, d)] % 10), alpha=0.85))
    # node separators and labels
    pos = 0
    ticks, labels = [], []
    for node in cluster.nodes:
        ax.axvline(pos, color="black", lw=0.6)
        ticks.append(pos + node.count / 2)
        labels.append(f"{node.name}\n{node.gpu}\n{node.region}")
        pos += node.count
    ax.axvline(pos, color="black", lw=0.6)
    ax.set_xlim(0, n)
    ax.set_ylim(0, len(tasks) + 1)
    ax.set_xticks(ticks)
    ax.set_xticklabels(labels, fontsize=6)
    ax.set_yticks([0.4 + i for i in range(len(tasks) + 1)])
    ax.set_yticklabels(["GPU group", *tasks], fontsize=7)
    ax.set_title(
        f"{doc['algorithm']}: {doc['iteration_time_s']:.1f} s/iteration, "
        f"{doc['throughput_tokens_s']:.0f} tokens/s, ${doc['cost_per_hour']:.2f}/h",
        fontsize=9,
    )
    handles = [
        Patch(color=colours(i % 10), label=f"{g['name']}: {', '.join(g['tasks'])}")
        for i, g in enumerate(doc["groups"])
    ]
    ax.legend(handles=handles, fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=2)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=130)
    plt.close(fig)
    return out
