from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.domain.operations.delivery import RetryPolicy

POLICY = RetryPolicy(base_s=10, max_s=900, give_up_after_s=7200, retry_after_max_s=3600)


def test_the_delay_doubles_up_to_the_cap():
    assert [POLICY.delay_s(n, jitter=1.0) for n in range(1, 9)] == [
        10, 20, 40, 80, 160, 320, 640, 900]
    assert POLICY.delay_s(1000, jitter=1.0) == 900


@given(st.integers(1, 10_000), st.floats(0, 1, exclude_max=True))
def test_jitter_keeps_the_delay_between_half_and_all_of_it(attempts, jitter):
    full = POLICY.delay_s(attempts, jitter=1.0)
    assert full / 2 <= POLICY.delay_s(attempts, jitter) <= full


def test_retry_after_wins_when_longer_and_is_bounded():
    assert POLICY.delay_s(1, 0.0, retry_after_s=120) == 120
    assert POLICY.delay_s(8, 1.0, retry_after_s=1) == 900
    assert POLICY.delay_s(1, 0.0, retry_after_s=86_400) == 3600


def test_gives_up_only_at_the_age():
    created = datetime(2026, 11, 2, tzinfo=UTC)
    assert not POLICY.gives_up(created, created + timedelta(seconds=7199))
    assert POLICY.gives_up(created, created + timedelta(seconds=7200))
