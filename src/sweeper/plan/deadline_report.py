"""The inverse question's answer for people (:mod:`sweeper.plan.deadline`): ``deadline.csv``, ``deadline.md`` and
the terminal table. Text is plain: :mod:`sweeper.report.md` escapes every piece of it in Markdown, and the terminal
table is printed with rich's markup off."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from sweeper.plan.deadline import MET, Question
from sweeper.report import md
from sweeper.report.fmt import cli, text
from sweeper.units import MISSING, count, days, missing, num

#: File names in the output directory (``plan.csv`` holds every row evaluated).
CSV, MARKDOWN = "deadline.csv", "deadline.md"


def _configuration(row: pd.Series) -> str:
    if row["status"] != MET:
        return MISSING
    return f"{row['engine']}, gc={cli(bool(row['gc']))}, per_device_batch_size={int(row['per_device_batch_size'])}"


def display(answers: pd.DataFrame) -> pd.DataFrame:
    """Display strings of the answers, best first: cluster, answer, nodes, GPUs, configuration, tokens/s per
    device, days, GPU-hours, cost."""
    return pd.DataFrame(
        {
            "cluster": [text(v) for v in answers["cluster"]],
            "answer": [text(v) for v in answers["status"]],
            "nodes": [count(v) for v in answers["nodes"]],
            "GPUs": [count(v) for v in answers["world_size"]],
            "configuration": [_configuration(r) for _, r in answers.iterrows()],
            "tokens/s/device": [num(v) for v in answers["predicted_tokens_per_s_per_device"]],
            "days": [days(v) for v in answers["predicted_train_days"]],
            "GPU-hours": [num(v) for v in answers["predicted_gpu_hours"]],
            "cost": [num(v) for v in answers["predicted_cost"]],
        }
    )


def question_lines(q: Question, model: str, seq_len: int, efficiencies: Sequence[float]) -> list[str]:
    """What was asked and under which assumptions, as plain-text lines."""
    batch = "as given (per_device_batch_size)" if q.fixed_batch else "the largest predicted to fit"
    nodes = f"nodes={q.fixed_nodes}" if q.fixed_nodes else f"the fewest nodes up to plan.max_nodes={q.max_nodes}"
    eff = ", ".join(f"{e:g}" for e in dict.fromkeys(efficiencies))
    return [
        f"Question: train {q.train_tokens:.3g} tokens of {model} at seq_len={seq_len} within "
        f"{q.deadline_days:g} days (plan.deadline_days): per cluster, {nodes} and the configuration with the fewest "
        f"GPU-hours",
        f"Per-device batch: {batch}; days from the time model at plan.efficiency={eff} (docs/planning.md); "
        "calibrate it on a measured sweep with plan.calibrate=<sweep dir>",
        "Ranked by cost (GPU-hours x cluster.price_per_gpu_hour) when every answering cluster has a price, "
        "else by GPU-hours",
    ]


def markdown(title: str, command: str, lines: Sequence[str], answers: pd.DataFrame, files: Sequence[str]) -> str:
    """``deadline.md``: title, command, the question, the answer table, the reasons of clusters that cannot meet
    the deadline and the files; every piece of outside text escaped."""
    parts = [
        f"# {md.escape(title)}",
        md.code(command),
        "Predicted before anything runs (`sweeper.plan`): nothing was launched.",
        "\n".join(f"- {md.escape(line)}" for line in lines),
        "## Answer",
        md.table(display(answers)),
    ]
    missed = answers[answers["status"] != MET]
    if len(missed):
        parts += [
            "## Not within the deadline",
            "\n".join(f"- {md.escape(f'{c}: {r}')}" for c, r in zip(missed["cluster"], missed["reason"], strict=True)),
        ]
    parts += ["## Files", "\n".join(f"- {md.code(f)}" for f in files)]
    return "\n\n".join(parts) + "\n"


def write(
    out_dir: Path, title: str, command: str, lines: Sequence[str], answers: pd.DataFrame, rows: pd.DataFrame
) -> list[str]:
    """Write ``deadline.csv``, ``deadline.md`` and ``plan.csv`` (every row evaluated) into ``out_dir``.

    Returns:
        The paths written, ``deadline.md`` first.
    """
    from sweeper.plan.app import CSV as PLAN_CSV

    out_dir.mkdir(parents=True, exist_ok=True)
    files = [str(out_dir / name) for name in (MARKDOWN, CSV, PLAN_CSV)]
    answers.to_csv(out_dir / CSV, index=False)
    rows.to_csv(out_dir / PLAN_CSV, index=False)
    (out_dir / MARKDOWN).write_text(markdown(title, command, lines, answers, files), encoding="utf-8")
    return files


def print_answer(title: str, lines: Sequence[str], answers: pd.DataFrame, files: Sequence[str]) -> None:
    """Print the answer: title, question, the table (rich, markup off), the reasons, then the files (last line:
    ``Answer: <dir>/deadline.md (...)``)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(markup=False, highlight=False, emoji=False)
    if not console.is_terminal:
        console.width = 240
    console.print(Text(title, style="bold"))
    for line in lines:
        console.print(Text(f"  {line}"), soft_wrap=True)
    frame = display(answers)
    table = Table(header_style="bold")
    for column in frame.columns:
        table.add_column(Text(column), justify="left" if column in ("cluster", "answer", "configuration") else "right")
    for values in frame.itertuples(index=False):
        table.add_row(*(Text(str(v)) for v in values))
    console.print(table)
    for cluster, reason in zip(answers["cluster"], answers["reason"], strict=True):
        if not missing(reason):
            console.print(Text(f"{cluster}: {reason}"), soft_wrap=True)
    console.print(Text(f"Answer: {files[0]} ({', '.join(files[1:])})"), soft_wrap=True)
