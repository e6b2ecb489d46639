"""Options a command would ignore are refused, before anything starts."""

from __future__ import annotations

import os

import pytest

from vcm.cli.main import main


@pytest.mark.parametrize("option", [["--agent", "ann"], ["--token", "vcm_x"]])
def test_mcp_over_http_refuses_the_stdio_options(
    option: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [n for n in os.environ if n.startswith("VCM_")]:  # refused before settings are read
        monkeypatch.delenv(name)
    monkeypatch.setenv("VCM_EVAL_DATA", "/nowhere")  # a setting that does not exist: not read at all
    assert main(["mcp", "--transport", "http", *option]) == 2
    err = capsys.readouterr().err
    assert "VALIDATION_ERROR" in err and option[0] in err
