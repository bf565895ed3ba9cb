"""The bar chart of the benchmark reports (decode_report.py, paged_report.py):
a group of bars a row, one bar a series, a dashed reference line. Without
matplotlib it says so and draws nothing."""
import sys


def grouped_bars(path, labels, series, reference, ylabel, title, inches_per_row=0.9):
    """labels: a row's x tick; series: [(legend, [value a row])]; reference:
    (y, legend) of the dashed line."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot", file=sys.stderr)
        return
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(8, inches_per_row * len(labels)), 4.5))
    for s, (legend, values) in enumerate(series):
        xs = [i + (s - (len(series) - 1) / 2) * width for i in range(len(labels))]
        ax.bar(xs, values, width, label=legend)
    ax.axhline(reference[0], color="black", linestyle="--", linewidth=1, label=reference[1])
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=6)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
