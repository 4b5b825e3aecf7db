"""The one run-id rule (provision/ids.py) that `up` and the cloud launch share."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest

from provision.errors import BadInput
from provision.ids import check_run_id, is_run_id, new_run_id


def test_run_id_is_utc_timestamp_then_four_random_hex_digits() -> None:
    made = new_run_id(datetime(2026, 11, 30, 2, 8, 46, 999_999, tzinfo=timezone.utc))
    assert re.fullmatch(r"20261130-020846-[0-9a-f]{4}", made), made
    # another zone's clock is written in UTC: the documented YYYYMMDD-HHMMSS is always UTC
    cet = timezone(timedelta(hours=1))
    assert new_run_id(datetime(2026, 11, 30, 3, 8, 46, tzinfo=cet)).startswith("20261130-020846-")
    now = datetime.now(timezone.utc)
    assert new_run_id()[:8] in {now.strftime("%Y%m%d"), (now + timedelta(seconds=5)).strftime("%Y%m%d")}


def test_run_ids_differ_within_one_second() -> None:
    t = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    ids = {new_run_id(t) for _ in range(64)}
    assert len(ids) > 32  # 65536 suffixes: a handful of collisions at most, never one id for all
    assert all(is_run_id(i) for i in ids)


def test_up_and_cloud_use_the_one_function() -> None:
    from provision.fleet import up

    assert up.new_run_id is new_run_id  # the cloud launcher imports it from provision.ids too


@pytest.mark.parametrize("bad", ["20261130-020846-FC86", "20261130-020846-fc8", "2026113-020846-fc86", "x/../y", ""])
def test_only_that_form_is_a_run_id(bad: str) -> None:
    assert not is_run_id(bad)
    with pytest.raises(BadInput):
        check_run_id(bad)
