"""Durations and counts are said the same way in every table, line and page."""

import pytest

from vitexport.core.words import count, milliseconds


@pytest.mark.parametrize("value, said", [(4.049, "4.05 ms"), (56.081, "56.1 ms"), (184.2, "184 ms"),
                                         (999.4, "999 ms"), (1058.7, "1,059 ms"), (608287.0, "608,287 ms")])
def test_milliseconds_never_turn_scientific(value, said):
    assert milliseconds(value) == said


@pytest.mark.parametrize("n, said", [(0, "0 rows"), (1, "1 row"), (2, "2 rows")])
def test_a_count_agrees_with_its_noun(n, said):
    assert count(n, "row") == said
    assert count(n, "batch", "batches").startswith(str(n))
