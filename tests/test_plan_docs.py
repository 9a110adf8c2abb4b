"""Each plan key's meaning, written once under its field: read by planner/plan/docs.py, and shown as the table of
docs/plan-keys.md, the app's help and the CLI's help."""

import contextlib
import io
from dataclasses import dataclass, fields

import plan_keys
import pytest
from conftest import ROOT
from streamlit.testing.v1 import AppTest

from planner.cli import main
from planner.plan.config import Plan
from planner.plan.docs import field_docs, is_section, key_doc, key_docs, key_fields, keys_to_table, meaning_and_default
from ui.state import HELP, PATHS


@dataclass
class _Example:
    width: int = 4
    """Columns of the
    example,   in units."""
    height: int = 2  # a comment is no doc
    depth: int | None = None
    """How deep. Default: the width."""


def test_field_docs_reads_the_string_under_each_field():
    assert field_docs(_Example) == {
        "width": "Columns of the example, in units.",
        "depth": "How deep. Default: the width.",
    }

    @dataclass
    class Nested:
        x: int = 0
        """Not read: a class inside a function is not in its module's top level."""

    with pytest.raises(TypeError, match="is not a top-level class"):
        field_docs(Nested)


def test_every_plan_key_has_a_doc_written_once():
    docs = key_docs()
    assert {k for k, doc in docs.items() if not doc.endswith(".")} == set()  # every field, sections included
    assert len(docs) == len(key_fields()) > 130
    assert "model.params" in docs and "model.approx_params" not in docs  # the plan file's name of the count
    assert key_doc("workload.micro_batch_size") == "Sequences per GPU per forward/backward."
    assert [f.name for f in fields(Plan)][:2] == ["model", "workload"] and is_section("workload.lora")


def test_table_defaults_come_from_the_doc_or_the_field():
    assert meaning_and_default("workload.micro_batch_size") == ("Sequences per GPU per forward/backward.", "`1`")
    assert meaning_and_default("parallelism.data") == (
        "Data-parallel degree.",
        "`hardware.count / (tensor × pipeline × context)`",
    )
    assert meaning_and_default("workload.lora.targets")[1] == "`[q, v]`"
    assert meaning_and_default("model.num_layers")[1].startswith("required")
    assert meaning_and_default("techniques.compile")[1] == "`false`"


def test_the_docs_table_is_current():
    doc = (ROOT / "docs" / "plan-keys.md").read_text()
    assert keys_to_table() in doc, "run python bench/plan_keys.py --write"
    assert plan_keys.updated(doc, keys_to_table()) == doc
    assert keys_to_table().count("\n") == sum(not is_section(k) for k in key_fields()) + 1


def test_each_plan_input_of_the_app_shows_its_keys_doc():
    assert all(HELP[widget] == key_doc(".".join(path)) for widget, path in PATHS.items())
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    assert at.number_input(key="micro_batch_size").help == key_doc("workload.micro_batch_size")
    assert at.selectbox(key="framework").help.startswith(key_doc("framework"))


def test_cli_options_that_set_a_plan_key_show_its_doc():
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        main(["estimate", "--help"])
    text = " ".join(out.getvalue().split())  # argparse wraps the lines
    for option, key in (("--gpus N", "hardware.count"), ("--gpu ID", "hardware.gpu"), ("--preset ID", "model.preset")):
        assert f"{option} sets {key}," in text and " ".join(key_doc(key).split()) in text
