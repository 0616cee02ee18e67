"""The gates as a JUnit XML report (`--junit-xml PATH`), the layout GitLab, Jenkins, Buildkite
and GitHub's test-report actions read: `testsuites` > `testsuite` (with its tests, failures,
errors and skipped counts) > one `testcase` per check, named by its expression, with a
`failure` (the value, the threshold and each crossing step) when it fails, and a `skipped`
testcase for each top-level entry of a checks file that the command does not have. Written with
the standard library; the same checks give the same bytes (no timestamps)."""
from __future__ import annotations

import os
import xml.etree.ElementTree as ET

from ..core.errors import OutputError
from .api import Plan, crossing_text, line


def render(p: Plan, checks: list[dict]) -> bytes:
    """The report's bytes (UTF-8, with an XML declaration)."""
    name = f"rollout-cli {p.command}"
    counts = {"tests": str(len(checks) + len(p.skipped)), "failures": str(sum(not c["passed"] for c in checks)),
              "errors": "0", "skipped": str(len(p.skipped))}
    root = ET.Element("testsuites", {"name": name, **counts})
    suite = ET.SubElement(root, "testsuite", {"name": name, **counts})
    classname = f"rollout-cli.{p.command}"
    for c in checks:
        case = ET.SubElement(suite, "testcase", {"name": c["expr"], "classname": classname})
        if not c["passed"]:
            fail = ET.SubElement(case, "failure", {"message": line(c), "type": "threshold"})
            body = [f"value: {_text(c['value'])}", f"threshold: {c['op']} {c['threshold']}"]
            if c["steps"]:
                body.append(f"crossed at: {crossing_text(c, None)}")
            fail.text = "\n".join(body)
    for s in p.skipped:
        case = ET.SubElement(suite, "testcase", {"name": s["expr"], "classname": classname})
        ET.SubElement(case, "skipped", {"message": s["note"]})
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def write(path: str, p: Plan, checks: list[dict]) -> None:
    """Write the report to `path` (its folder is created); OutputError (exit 6) when it cannot be."""
    data = render(p, checks)
    try:
        parent = os.path.dirname(os.path.abspath(path))
        os.makedirs(parent, exist_ok=True)
        tmp = f"{path}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as e:
        raise OutputError(f"--junit-xml {path}: cannot write it: {e.strerror or e}") from None


def _text(v) -> str:
    return "null (a null or NaN figure fails)" if v is None else str(v)
