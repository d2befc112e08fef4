"""The examples in public docstrings run."""

import doctest
import importlib

import pytest


@pytest.mark.parametrize(
    "module",
    [
        "embedtext",
        "embedtext.protocol.codec",
        "embedtext.protocol.reply_wire",
        "embedtext.server.cpu_threads",
        "embedtext.connectors.client",
        "embedtext.connectors.jobs.spec",
        "embedtext.connectors.jobs.schedule",
        "embedtext.corpus",
        "embedtext.sql.ddl",
        "embedtext.udf.registration",
        "embedtext.bench.measure",
        "embedtext.bench.rounds",
        "embedtext.bench.report",
    ],
)
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
