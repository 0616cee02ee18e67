"""`report`: one self-contained HTML page of a run's rollouts, from the inspect aggregations."""
from .data import DEFAULT_DETAILS, ReportOptions, collect
from .page import build_report, read_data, render_html

__all__ = ["DEFAULT_DETAILS", "ReportOptions", "collect", "build_report", "render_html", "read_data"]
