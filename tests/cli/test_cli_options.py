"""Options a command would ignore are refused, before anything starts."""

from __future__ import annotations

import pytest

from vcm.cli.main import main


@pytest.mark.parametrize("option", [["--agent", "ann"], ["--token", "vcm_x"]])
def test_mcp_over_http_refuses_the_stdio_options(option: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mcp", "--transport", "http", *option]) == 2
    err = capsys.readouterr().err
    assert "VALIDATION_ERROR" in err and option[0] in err
