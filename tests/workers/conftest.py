"""Fixtures shared by the worker tests live in their modules; this registers assertion details for
the shared helpers."""

import pytest

pytest.register_assert_rewrite("tests.workers.traffic")
