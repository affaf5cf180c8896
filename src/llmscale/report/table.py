"""Terminal comparison table of a backtest (``rich``), laid out for the terminal's width.

The full comparison (the policy name and 14 numeric columns) needs about 137 columns. On a
narrower terminal :class:`ComparisonView` keeps every number in sight, trying in turn:

1. one table with the two-line headers (``SLO`` over ``attain.``);
2. two tables, each with the policy column: the numbers a policy is chosen on first
   (:attr:`Column.primary`: attainment, tail latency, GPU-hours, mean fleet) and the rest second;
3. the same two tables with one-line abbreviated headers (:attr:`Column.abbrev`), each
   explained in a legend line under the tables ("TTFT99 = TTFT p99 (s)");
4. as many abbreviated tables as the width needs, the primary columns first.

The policy column is never dropped: it leads every table and folds only names longer than
:data:`POLICY_MAX_WIDTH`. Numbers are never wrapped or cut. Measured on the document of
``--policy slo,static --duration-s 600``, before the two feasibility columns (infeasible
requests, attainment over the feasible ones; 137 for the whole table since): one table from
116 columns, two with full headers from 78, two abbreviated from 65, three to twelve below
(``tests/report/test_report_table.py`` renders at 80, 100 and 160, and at 40).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from llmscale.report._common import (
    COLUMNS,
    Column,
    Row,
    best_rows,
    cell_text,
    foresight_text,
    judged_text,
    measure_of,
    measure_unit,
    noise_ties,
    report_title,
    rows_of,
    seeds_text,
    slo_text,
)

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderableType
    from rich.table import Table

__all__ = ["POLICY_MAX_WIDTH", "ComparisonView", "comparison_table", "comparison_view", "legend_text"]

#: Style of the best value in a highlighted column (best attainment, lowest GPU-hours).
BEST_STYLE = "bold green"
#: The oracle row is dimmed: it is a hindsight bound, not a policy one could deploy.
ORACLE_STYLE = "italic dim"
#: The policy column is as wide as its longest name up to this; longer names fold onto a second
#: line rather than push numbers off the screen ("● oracle (lower bound)" is 22).
POLICY_MAX_WIDTH = 24


def comparison_table(doc: Mapping[str, Any]) -> Table:
    """Build one ``rich`` table comparing every policy of a backtest document, all columns.

    One row per entry of ``doc["results"]`` (in order) and, when present, ``doc["oracle"]`` last,
    labelled as a lower bound and set apart by a separator. The best SLO attainment and the lowest
    GPU-hours among the real policies are highlighted in bold green; missing values print as "—".

    Every cell is a :class:`rich.text.Text`, so policy and workload names containing ``[...]`` are
    printed literally instead of being parsed as rich markup. For a terminal of any width print
    :func:`comparison_view` instead, which splits this table when it does not fit.
    """
    rows = rows_of(doc)
    return _table(
        rows, COLUMNS, short=False, title=report_title(doc), caption=_caption(doc, rows, ()), doc=doc
    )


def comparison_view(doc: Mapping[str, Any]) -> ComparisonView:
    """The comparison as a renderable that lays itself out for the console's width (see module doc)."""
    return ComparisonView(doc)


class ComparisonView:
    """Renders :func:`comparison_table`, or its columns split over tables, to fit ``max_width``."""

    def __init__(self, doc: Mapping[str, Any]) -> None:
        self.doc = doc
        self.rows = rows_of(doc)  # a malformed document fails here, not while printing

    def layouts(self) -> Iterator[tuple[tuple[tuple[Column, ...], ...], bool]]:
        """Candidate layouts in order of preference: (column groups, abbreviated headers?)."""
        primary = tuple(c for c in COLUMNS if c.primary)
        rest = tuple(c for c in COLUMNS if not c.primary)
        yield (COLUMNS,), False
        yield (primary, rest), False
        yield (primary, rest), True

    def tables(self, console: Console, width: int) -> tuple[list[Table], tuple[Column, ...]]:
        """The tables that fit ``width`` and the columns shown abbreviated (for the legend)."""
        title = report_title(self.doc)
        for groups, short in self.layouts():
            tables = [
                _table(
                    self.rows, cols, short=short, title=title if i == 0 else None, caption=None, doc=self.doc
                )
                for i, cols in enumerate(groups)
            ]
            if all(_min_width(console, t) <= width for t in tables):
                return tables, COLUMNS if short else ()
        # Narrower still: as many abbreviated tables as it takes, the primary columns first.
        packed = _pack(self.rows, console, width, self.doc)
        tables = [
            _table(self.rows, cols, short=True, title=title if i == 0 else None, caption=None, doc=self.doc)
            for i, cols in enumerate(packed)
        ]
        return tables, COLUMNS

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[RenderableType]:
        from rich.text import Text

        tables, abbreviated = self.tables(console, options.max_width)
        for i, table in enumerate(tables):
            if i:
                yield Text("")
            yield table
        for line in _caption_lines(self.doc, self.rows, abbreviated, options.max_width):
            yield Text(line, style="dim")


def legend_text(columns: Iterable[Column]) -> str:
    """``"SLO% = SLO attainment · TTFT99 = TTFT p99 (s) · ..."`` for the abbreviated ``columns``."""
    return " · ".join(f"{c.abbrev} = {c.title}" for c in columns if c.abbrev)


def _caption_bits(doc: Mapping[str, Any], rows: Sequence[Row]) -> list[str]:
    unit = measure_unit(measure_of(doc)[1])
    oracle_text = f"oracle = hindsight lower bound on {unit}" if any(r.is_oracle for r in rows) else ""
    bits = [
        slo_text(doc),
        "bold green = best attainment / lowest GPU-hours",
        oracle_text,
        foresight_text(doc),
        judged_text(doc),
        seeds_text(doc),
    ]
    return [bit for bit in bits if bit]


def _caption(doc: Mapping[str, Any], rows: Sequence[Row], abbreviated: Sequence[Column]) -> str:
    text = " · ".join(_caption_bits(doc, rows))
    legend = legend_text(abbreviated)
    return f"{text}\n{legend}" if legend else text


def _caption_lines(
    doc: Mapping[str, Any], rows: Sequence[Row], abbreviated: Sequence[Column], width: int
) -> list[str]:
    """The caption, then the legend, each broken between its entries: "TTFT99 = TTFT p99 (s)"
    stays on one line so the abbreviation and its meaning are read together."""
    lines: list[str] = []
    legend = [f"{c.abbrev} = {c.title}" for c in abbreviated if c.abbrev]
    for entries in (_caption_bits(doc, rows), legend):
        line = ""
        for entry in entries:
            joined = f"{line} · {entry}" if line else entry
            if line and len(joined) + len(" ·") > width:  # room for the " ·" that ends a broken line
                lines.append(line + " ·")
                line = entry
            else:
                line = joined
        if line:
            lines.append(line)
    return lines


def _policy_width(rows: Sequence[Row]) -> int:
    longest = max((len(r.label) for r in rows), default=0)
    return min(POLICY_MAX_WIDTH, max(len("Policy"), 2 + longest))


def _min_width(console: Console, table: Table) -> int:
    """Columns the table needs with every number whole and the policy column at its width."""
    from rich.measure import Measurement

    # Measured without a width limit: Measurement.get clamps to the options' width, which would
    # make every table "fit" a narrow console.
    return Measurement.get(console, console.options.update_width(100_000), table).minimum


def _pack(
    rows: Sequence[Row], console: Console, width: int, doc: Mapping[str, Any]
) -> list[tuple[Column, ...]]:
    """Columns, primary ones first, as few to a table as ``width`` needs (at least one each)."""
    groups: list[tuple[Column, ...]] = []
    current: list[Column] = []
    for column in sorted(COLUMNS, key=lambda c: not c.primary):  # stable: usual order within each
        trial = (*current, column)
        table = _table(rows, trial, short=True, title=None, caption=None, doc=doc)
        fits = _min_width(console, table) <= width
        if current and not fits:
            groups.append(tuple(current))
            current = [column]
        else:
            current = list(trial)
    if current:
        groups.append(tuple(current))
    return groups


def _table(
    rows: Sequence[Row],
    columns: Sequence[Column],
    *,
    short: bool,
    title: str | None,
    caption: str | None,
    doc: Mapping[str, Any],
) -> Table:
    # Imported here so `import llmscale.report` stays cheap for CLI commands that never print a table.
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table(
        title=Text(title, style="bold") if title else None,
        caption=Text(caption) if caption else None,
        # SIMPLE_HEAVY, but with a thin rule as the section separator (drawn above the oracle).
        box=box.Box("    \n    \n ━━ \n    \n ── \n ━━ \n    \n    \n"),
        header_style="bold",
        pad_edge=False,
        collapse_padding=True,
        show_edge=False,
    )
    # Numeric columns get a fixed width (their widest value or header line), so numbers are never
    # wrapped or cut; on a narrow terminal only the policy column gives way (long names fold).
    policy_width = _policy_width(rows)
    table.add_column("Policy", vertical="bottom", overflow="fold", min_width=policy_width)
    best = {column.key: best_rows(rows, column) for column in columns}
    # With --seeds: "≈" marks a value within noise of the best (paired over seeds).
    ties = {column.key: noise_ties(doc, rows, column, best[column.key]) for column in columns}
    texts = {
        column.key: [
            cell_text(row, column) + (" ≈" if i in ties[column.key] else "") for i, row in enumerate(rows)
        ]
        for column in columns
    }
    for column in columns:
        header = column.abbrev if short and column.abbrev else column.header
        width = max(len(text) for text in [*texts[column.key], *header.splitlines()])
        table.add_column(header, justify="right", vertical="bottom", width=width, no_wrap=True)

    for i, row in enumerate(rows):
        if row.is_oracle and i > 0 and not rows[i - 1].is_oracle:
            # A rule above the oracle (the causal reference follows it): the bounds are not ranked.
            table.add_section()
        # The coloured bullet ties the row to the policy's line colour in the HTML report.
        name = Text.assemble(("● ", row.color), (row.label, ORACLE_STYLE if row.is_oracle else "bold"))
        cells: list[Text] = [name]
        for column in columns:
            style = BEST_STYLE if i in best[column.key] else (ORACLE_STYLE if row.is_oracle else "")
            cells.append(Text(texts[column.key][i], style=style))
        table.add_row(*cells)
    return table
