"""The report page: the template, its style and script, plotly.js and the data, inlined in one file.

Nothing on the page is fetched when it is opened: the data is a JSON script element and the
plotting library is plotly.js as the `plotly` package ships it (`plotly.offline.get_plotlyjs`).
"""
from __future__ import annotations

import json
import os
import stat
from importlib import resources

from ..core.errors import OutputError, OutputExistsError, UsageError, output_error
from ..core.storage import write_durable
from ..core.versions import __version__
from .data import Progress, ReportOptions, collect

_ASSETS = ("report.html", "report.css", "report.js")


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath("assets", name).read_text(encoding="utf-8")


def _plotly_js() -> tuple[str, str]:
    try:
        import plotly
        from plotly.offline import get_plotlyjs
    except ImportError:
        raise UsageError("report needs plotly: pip install 'rollout-cli[report]'") from None
    return get_plotlyjs(), plotly.__version__


def _inline_json(data: dict) -> str:
    # "<" escaped so that no "</script>" (or "<!--") inside a string can end the script element
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")


def _inline_script(js: str) -> str:
    if "</script" in js.lower():
        raise AssertionError("inlined script holds </script")  # plotly.min.js has none; guard a future one
    return js


def render_html(data: dict) -> str:
    """The whole page, as text, for the data `collect` returns."""
    plotly_js, plotly_version = _plotly_js()
    page = _asset("report.html")
    parts = {
        "{{TITLE}}": "rollout-cli report",
        "{{STYLE}}": _asset("report.css"),
        "{{PLOTLY_JS}}": _inline_script(plotly_js),
        "{{REPORT_JS}}": _inline_script(_asset("report.js")),
        "{{DATA}}": _inline_json({**data, "generator": f"rollout-cli {__version__}", "plotly": plotly_version}),
    }
    for k, v in parts.items():
        head, sep, tail = page.partition(k)
        if not sep:
            raise AssertionError(f"template lacks {k}")
        page = head + v + tail  # not str.replace: the inlined texts may hold "{{"
    return page


# in the head of every page (assets/report.html): how --overwrite knows a file is a page report wrote
MARKER = '<meta name="generator" content="rollout-cli report">'
_HEAD = 4096  # bytes of an existing file read to find the marker


def _is_page(path: str) -> bool:
    """`path` is a regular file whose head holds MARKER (a report page): read without following
    a link or blocking, only once lstat says it is a regular file."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode) and MARKER.encode() in os.pread(fd, _HEAD, 0)
    finally:
        os.close(fd)


def _check_target(path: str, overwrite: bool) -> None:
    """An existing `path` is replaced only when it is a page report wrote, and with overwrite;
    anything else there is refused whatever the flags (exit 5)."""
    if not os.path.lexists(path):
        return
    if os.path.isdir(path) and not os.path.islink(path):
        raise OutputError(f"{path}: is a directory")
    if not _is_page(path):
        raise OutputExistsError(f"{path}: exists and is not a page report wrote; it is not replaced: choose another -o")
    if not overwrite:
        raise OutputExistsError(f"{path}: exists (--overwrite replaces it)")


def _write_atomic(path: str, text: str, overwrite: bool) -> int:
    _check_target(path, overwrite)
    data = text.encode("utf-8")
    try:
        write_durable(path, data)  # the page appears whole or not at all
    except OSError as e:
        raise output_error(path, e) from None
    return len(data)


def build_report(paths: list[str], out: str, options: ReportOptions | None = None, *, overwrite: bool = False,
                 progress: Progress | None = None) -> dict:
    """Write the report page for `paths` to `out`; returns `{"path", "bytes", "counts": {split: {...}}}`."""
    opts = options or ReportOptions.default()
    opts.check()
    if not os.path.isdir(out):
        _check_target(out, overwrite)  # before reading anything
    _plotly_js()  # fail on a missing extra before reading anything
    data = collect(paths, opts, progress)
    size = _write_atomic(out, render_html(data), overwrite)
    counts = {}
    for split, d in data["splits"].items():
        s = d["inspect"]["summary"]
        counts[split] = {"steps": s["steps"], "samples": s["samples"], "rows": s["rows"], "rejected": s["rejected"],
                         "rollouts": s["rollouts"], "anomalies": sum(s["anomaly_counts"].values()),
                         "rollouts_embedded": len(d["details"])}
    result = {"path": out, "bytes": size, "counts": counts}
    if "trainer" in data:
        s = data["trainer"]["audit"]["summary"]
        result["trainer"] = {"paired_steps": s["paired_steps"], "samples": s["samples"], "divergences": s["divergences"],
                             "rule_differences": s["rule_differences"],
                             "rollouts_embedded": len(data["trainer"]["tokens"])}
    return result


_DATA_OPEN = '<script type="application/json" id="report-data">'


def read_data(path: str) -> dict:
    """The data embedded in a report page that `build_report` wrote."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    start = text.find(_DATA_OPEN)
    end = text.find("</script>", start)
    if start < 0 or end < 0:
        raise UsageError(f"{path}: not a rollout-cli report page (no embedded data)")
    return json.loads(text[start + len(_DATA_OPEN):end])
