"""Reports: load leaderboard inputs (``inputs``), draw inline SVG charts (``svg``), render HTML,
Markdown and CSV (``render``)."""

from idealized_runtime.report.render import ReportFiles, render_html, render_markdown, write_report

__all__ = ["ReportFiles", "render_html", "render_markdown", "write_report"]
