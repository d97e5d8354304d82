"""The interactive throughput vs peak-memory plot of report.html (plotly), from
:class:`sweeper.report.plot_data.PlotData`.

Outside text never becomes markup here: plotly hover text and annotations are HTML-escaped (plotly reads a subset of
HTML in them). plotly is imported only inside the function that draws.
"""

from __future__ import annotations

import html

from sweeper.report.plot_data import FAILED_TITLE, OK_TITLE, Y_LABEL, PlotData, predicted_segments


def plot_html(data: PlotData) -> str:
    """The interactive plot as an HTML ``<div>`` with plotly.js inlined (no CDN). The strip of points that were
    not measured is drawn only when there are such points. The axes are fixed to :attr:`PlotData.x_max` and
    :attr:`PlotData.y_max` (memory unit, tokens/s per device); when predicted markers fall outside them the
    predictions start hidden (``visible="legendonly"``: the "predicted" legend entry shows them) and the title of
    the plot says how many (double-click on the plot fits every shown marker)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    strip = bool(len(data.failed))
    note = data.predicted_note
    ok_title = OK_TITLE.format(interval=data.interval)
    if note:
        hint = "click “predicted” in the legend to show them, double-click the plot to fit them"
        ok_title += f"<br><span style='font-size:11px;color:gray'>{html.escape(f'{note}: {hint}')}</span>"
    fig = make_subplots(
        rows=2 if strip else 1,
        cols=1,
        shared_xaxes=True,
        row_heights=[0.78, 0.22] if strip else None,
        vertical_spacing=0.06,
        subplot_titles=(ok_title, FAILED_TITLE) if strip else (ok_title,),
    )
    ok, front = data.ok, data.ok[data.ok["on_frontier"]]
    if len(ok):
        fig.add_trace(
            go.Scatter(
                x=ok["x"],
                y=ok["y"],
                mode="markers",
                name="ok",
                text=ok["hover"],
                hoverinfo="text",
                marker={"size": 9, "color": "#1f77b4"},
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": (ok["y_high"] - ok["y"]).to_numpy(dtype=float),  # arrays: plotly keeps them
                    "arrayminus": (ok["y"] - ok["y_low"]).to_numpy(dtype=float),
                    "thickness": 1,
                    "width": 3,
                    "color": "#1f77b4",
                },
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=front["x"],
                y=front["y"],
                mode="lines+markers",
                line_shape="hv",
                name="Pareto frontier",
                text=front["hover"],
                hoverinfo="text",
                marker={"size": 14, "symbol": "star", "color": "#d62728"},
            ),
            row=1,
            col=1,
        )
    pred = data.predicted
    if len(pred):
        xs, ys = predicted_segments(pred)
        shown: bool | str = "legendonly" if note else True  # one legend click shows both traces of the group
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines",
                name="prediction to measurement",
                legendgroup="predicted",
                visible=shown,
                hoverinfo="skip",
                line={"dash": "dot", "color": "gray", "width": 1},
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=pred["px"],
                y=pred["py"],
                mode="markers",
                name="predicted",
                legendgroup="predicted",
                visible=shown,
                text=pred["hover"],
                hoverinfo="text",
                marker={"size": 9, "symbol": "circle-open", "color": "#1f77b4", "line": {"width": 1.5}},
            ),
            row=1,
            col=1,
        )
    for status, grp in data.failed.groupby("status", sort=True):
        fig.add_trace(
            go.Scatter(
                x=grp["x"],
                y=grp["status"],
                mode="markers",
                name=str(status),
                text=grp["hover"],
                hoverinfo="text",
                marker={"size": 11, "symbol": "x"},
            ),
            row=2,
            col=1,
        )
    for name, cap in data.devices:
        fig.add_vline(x=cap, line_dash="dash", line_color="gray", annotation_text=html.escape(name), row="all", col=1)
    if not len(ok):
        fig.add_annotation(
            text="no ok points" if strip else "no points",
            showarrow=False,
            xref="x domain",
            yref="y domain",
            x=0.5,
            y=0.5,
            row=1,
            col=1,
        )
    fig.update_xaxes(title_text=data.xlabel, row=2 if strip else 1, col=1)
    fig.update_xaxes(range=[0, data.x_max])  # every row: the strip shares the x axis
    if len(ok):
        fig.update_yaxes(title_text=Y_LABEL, row=1, col=1, range=[0, data.y_max])
    else:
        fig.update_yaxes(title_text=Y_LABEL, row=1, col=1, rangemode="tozero")
    if strip:
        fig.update_yaxes(title_text="status", row=2, col=1)
    fig.update_layout(height=650 if strip else 520, hovermode="closest", template="plotly_white")
    return fig.to_html(full_html=False, include_plotlyjs=True)
