from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

import pendulum
import pytest

from airflow_iceberg.exceptions import InvalidSpecError
from airflow_iceberg.timestamps import to_epoch_millis, to_snapshot_id

MS_2024 = 1704067200000  # 2024-01-01T00:00:00Z


@pytest.mark.parametrize(
    "value",
    [
        MS_2024,
        str(MS_2024),
        "2024-01-01T00:00:00+00:00",
        "2024-01-01T00:00:00Z",
        "2024-01-01T01:00:00+01:00",
        "2024-01-01",
        datetime(2024, 1, 1, tzinfo=timezone.utc),
        datetime(2024, 1, 1),
        datetime(2024, 1, 1, 2, tzinfo=timezone(timedelta(hours=2))),
        pendulum.datetime(2024, 1, 1),
        date(2024, 1, 1),
    ],
)
def test_every_accepted_form_gives_the_same_millis(value):
    assert to_epoch_millis(value) == MS_2024


@pytest.mark.parametrize("value", [None, "", "  "])
def test_empty_means_no_timestamp(value):
    assert to_epoch_millis(value) is None


@pytest.mark.parametrize("value", ["yesterday", True, 1.5, "2024-13-01"])
def test_unparseable_timestamps_are_rejected(value):
    with pytest.raises(InvalidSpecError, match="as_of_timestamp"):
        to_epoch_millis(value)


def test_snapshot_ids_from_templates():
    assert to_snapshot_id("6754764947717687654") == 6754764947717687654
    assert to_snapshot_id(" 42 ") == 42
    assert to_snapshot_id(None) is None
    with pytest.raises(InvalidSpecError, match="did the upstream XCom exist"):
        to_snapshot_id("None")
    with pytest.raises(InvalidSpecError, match="snapshot_id"):
        to_snapshot_id("abc")
