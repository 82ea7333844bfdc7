"""The auto prefetch (sqljobs/_runtime/worker/prefetching.py): Little's law over the
worker's own claims and runs, between 1 and twice the largest claim. Pure arithmetic on
the samples a worker feeds it, so these tests give it the samples directly."""

from __future__ import annotations

from sqljobs._runtime.worker.claiming import MAX_CLAIM
from sqljobs._runtime.worker.prefetching import AUTO_CEILING, Prefetch


def sized(concurrency: int, claim_s: float, run_s: float) -> Prefetch:
    prefetch = Prefetch(None, concurrency)
    for _ in range(50):  # enough samples for the moving averages to settle
        prefetch.ran(run_s)
        prefetch.claimed(claim_s)
    return prefetch


def test_until_a_run_ends_the_auto_prefetch_is_the_concurrency() -> None:
    prefetch = Prefetch(None, 10)
    prefetch.claimed(0.005)
    assert prefetch.value == 10


def test_short_jobs_fill_the_local_queue_up_to_two_full_claims() -> None:
    # a backlog of no-op jobs: the worker then waits for half its room before claiming,
    # so every claim is a full one (jobs.claim's limit) while a full claim's jobs run
    assert AUTO_CEILING == 2 * MAX_CLAIM
    prefetch = sized(10, claim_s=0.005, run_s=0.00005)  # Little's law says 2,000
    assert prefetch.value == AUTO_CEILING
    assert sized(10, claim_s=0.05, run_s=0.00005).value == AUTO_CEILING  # never above it


def test_long_jobs_get_one_waiting_job_and_medium_ones_what_the_slots_need() -> None:
    assert sized(10, claim_s=0.005, run_s=1.0).value == 1
    assert sized(10, claim_s=0.005, run_s=0.01).value == 10


def test_a_fixed_prefetch_does_not_follow_the_samples() -> None:
    prefetch = Prefetch(7, 10)
    prefetch.ran(0.00005)
    prefetch.claimed(0.005)
    assert prefetch.value == 7
    assert str(prefetch) == "7"
