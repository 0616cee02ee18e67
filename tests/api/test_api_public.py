"""The public surface: `rollout_cli.__all__` and `dir(rollout_cli)` are the library and nothing
else, each name still the function or type it is after every submodule was imported (a
subpackage named like a command would rebind the name to itself), and `import rollout_cli`
plus convert, inspect and verify never import torch."""
from __future__ import annotations

import importlib
import inspect as pyinspect
import pkgutil
import subprocess
import sys

from conftest import SAMPLE_JSONL

import rollout_cli

FUNCTIONS = {"convert", "inspect", "verify", "audit", "report", "export", "derive", "check_gates", "open_output",
             "open_dataset"}
RESULTS = {"ConvertResult", "InspectResult", "RolloutResult", "VerifyResult", "AuditResult", "ReportResult",
           "ExportResult", "DeriveResult", "DerivedFile", "Output", "PackedBatch", "RankDataset"}
OPTIONS = {"ConvertOptions", "DeriveOptions"}
ERRORS = {"ExitCode", "RolloutCliError", "UsageError", "InvalidInputError", "IntegrityError", "ManifestError",
          "OutputExistsError", "OutputError", "OutputBusyError", "InputUnavailableError"}
OPTIONAL = {"torch", "ray", "tokenizers", "jinja2", "plotly", "PIL", "tensordict", "torchdata"}  # extras


def _import_every_submodule() -> list[str]:
    skipped = []
    for m in pkgutil.walk_packages(rollout_cli.__path__, "rollout_cli."):
        if m.name == "rollout_cli.__main__":  # runs the command line
            continue
        try:
            importlib.import_module(m.name)
        except ModuleNotFoundError as e:
            assert (e.name or "").split(".")[0] in OPTIONAL, f"{m.name}: {e}"
            skipped.append(m.name)
    return skipped


def test_all_is_the_library():
    assert set(rollout_cli.__all__) == FUNCTIONS | RESULTS | OPTIONS | ERRORS | {"__version__"}
    assert len(rollout_cli.__all__) == len(set(rollout_cli.__all__))


def test_public_names_stay_functions_and_types_after_every_import():
    print("skipped (an optional dependency is missing):", _import_every_submodule())
    for name in rollout_cli.__all__:
        value = getattr(rollout_cli, name)
        assert not pyinspect.ismodule(value), f"rollout_cli.{name} is a module"
        if name in FUNCTIONS:
            assert pyinspect.isfunction(value) and value.__doc__, name
        elif name != "__version__":
            assert pyinspect.isclass(value) and value.__doc__, name
    assert dir(rollout_cli) == sorted(rollout_cli.__all__)
    for name in ERRORS - {"ExitCode"}:
        assert issubclass(getattr(rollout_cli, name), rollout_cli.RolloutCliError)
    import rollout_cli.errors as errors

    assert all(getattr(errors, n) is getattr(rollout_cli, n) for n in errors.__all__) and set(errors.__all__) == ERRORS


def test_an_unknown_name_is_an_attribute_error():
    try:
        rollout_cli.core_errors  # noqa: B018
    except AttributeError as e:
        assert "core_errors" in str(e)
    else:  # pragma: no cover
        raise AssertionError("no AttributeError")


def test_import_and_the_torch_free_commands_load_no_torch(tmp_path, sample_out_clean):
    code = ("import sys\n"
            "import rollout_cli\n"
            "assert dir(rollout_cli) == sorted(rollout_cli.__all__), dir(rollout_cli)\n"
            "assert 'pyarrow' not in sys.modules and 'torch' not in sys.modules\n"
            f"rollout_cli.verify({str(sample_out_clean)!r}, quick=True)\n"
            f"rollout_cli.inspect([{str(sample_out_clean)!r}])\n"
            f"rollout_cli.convert({str(SAMPLE_JSONL)!r}, {str(tmp_path / 'o')!r}, workers=1)\n"
            "assert 'pyarrow' in sys.modules and 'torch' not in sys.modules\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_every_public_function_runs_after_every_import(tmp_path, sample_out_clean):
    """Each name is called as the function it is once every submodule is loaded."""
    import pytest

    import train_dumps as T

    _import_every_submodule()
    r = rollout_cli
    assert isinstance(r.convert(SAMPLE_JSONL, tmp_path / "o", workers=1), r.ConvertResult)
    assert r.verify(tmp_path / "o").ok
    assert isinstance(r.check_gates(r.inspect(tmp_path / "o"), "rows > 1"), r.InspectResult)
    assert isinstance(r.open_output(tmp_path / "o"), r.Output)
    assert isinstance(r.derive(sample_out_clean, tmp_path / "d", as_="dpo"), r.DeriveResult)
    for step in (0, 1):
        samples = T.rollout_samples(step)
        T.write_rollout(tmp_path / "run" / "rollout_data", samples, step, "pt")
        T.write_train(tmp_path / "run" / "train_data", samples, step, n=2, rbs=3, dp=2)
    assert not r.audit(tmp_path / "run" / "rollout_data", tmp_path / "run" / "train_data").diverged
    pytest.importorskip("plotly")
    assert isinstance(r.report(sample_out_clean, tmp_path / "p.html"), r.ReportResult)
    pytest.importorskip("torch")
    assert isinstance(r.export(sample_out_clean, tmp_path / "e", split="eval"), r.ExportResult)
    assert r.open_dataset(sample_out_clean).steps
