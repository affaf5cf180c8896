"""Terminal comparison table of a backtest (``rich``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from llmscale.report._common import COLUMNS, best_rows, report_title, rows_of, slo_text

if TYPE_CHECKING:
    from rich.table import Table

__all__ = ["comparison_table"]

#: Style of the best value in a highlighted column (best attainment, lowest GPU-hours).
BEST_STYLE = "bold green"
#: The oracle row is dimmed: it is a hindsight bound, not a policy one could deploy.
ORACLE_STYLE = "italic dim"


def comparison_table(doc: Mapping[str, Any]) -> Table:
    """Build a ``rich`` table comparing every policy of a backtest document.

    One row per entry of ``doc["results"]`` (in order) and, when present, ``doc["oracle"]`` last,
    labelled as a lower bound and set apart by a separator. The best SLO attainment and the lowest
    GPU-hours among the real policies are highlighted in bold green; missing values print as "—".

    Every cell is a :class:`rich.text.Text`, so policy and workload names containing ``[...]`` are
    printed literally instead of being parsed as rich markup.
    """
    # Imported here so `import llmscale.report` stays cheap for CLI commands that never print a table.
    from rich import box
    from rich.table import Table
    from rich.text import Text

    rows = rows_of(doc)
    table = Table(
        title=Text(report_title(doc), style="bold"),
        caption=Text(
            " · ".join(
                bit
                for bit in (
                    slo_text(doc),
                    "bold green = best attainment / lowest GPU-hours",
                    "oracle = hindsight lower bound on GPU-hours" if any(r.is_oracle for r in rows) else "",
                )
                if bit
            )
        ),
        # SIMPLE_HEAVY, but with a thin rule as the section separator (drawn above the oracle).
        box=box.Box("    \n    \n ━━ \n    \n ── \n ━━ \n    \n    \n"),
        header_style="bold",
        pad_edge=False,
        collapse_padding=True,
        show_edge=False,
    )
    # Numeric columns get a fixed width (their widest value or header line), so numbers are never
    # wrapped or cut; on a narrow terminal only the policy column gives way (long names fold).
    table.add_column("Policy", vertical="bottom", overflow="fold", min_width=12)
    texts = {column.key: [column.fmt(row.summary.get(column.key)) for row in rows] for column in COLUMNS}
    for column in COLUMNS:
        width = max(len(text) for text in [*texts[column.key], *column.header.splitlines()])
        table.add_column(column.header, justify="right", vertical="bottom", width=width, no_wrap=True)

    best = {column.key: best_rows(rows, column) for column in COLUMNS}
    for i, row in enumerate(rows):
        if row.is_oracle and i > 0:
            # A rule above the oracle makes it obvious it is not ranked with the policies.
            table.add_section()
        # The coloured bullet ties the row to the policy's line colour in the HTML report.
        name = Text.assemble(("● ", row.color), (row.label, ORACLE_STYLE if row.is_oracle else "bold"))
        cells: list[Text] = [name]
        for column in COLUMNS:
            style = BEST_STYLE if i in best[column.key] else (ORACLE_STYLE if row.is_oracle else "")
            cells.append(Text(texts[column.key][i], style=style))
        table.add_row(*cells)
    return table
