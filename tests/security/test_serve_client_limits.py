"""What one client may hold of the server: render slots in turns, body bytes, connections.

The mechanisms of ``mediaref.serve.client_limits`` alone, driven step by step on one event loop
(no server, no timing): which waiter gets the next slot, what a cancelled waiter leaves behind,
what a refused charge leaves charged.
"""

from __future__ import annotations

import asyncio

import pytest

from mediaref.serve.client_limits import (
    BudgetExceeded,
    ByteBudget,
    ClientRate,
    ClientSemaphores,
    ConnectionCounts,
    FairGate,
    share,
)
from mediaref.serve.logs import RateLimitedLog


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


class Holder:
    """A task holding one of a gate's slots for ``client`` until released."""

    def __init__(self, gate: FairGate, client: str, order: list[str]) -> None:
        self.release = asyncio.Event()
        self.task = asyncio.create_task(self._hold(gate, client, order))

    async def _hold(self, gate: FairGate, client: str, order: list[str]) -> None:
        async with gate.slot(client):
            order.append(client)
            await self.release.wait()


async def test_a_client_holds_at_most_its_share_while_slots_stay_free() -> None:
    gate, order = FairGate(total=4, per_client=2), []
    holders = [Holder(gate, "a", order) for _ in range(3)]
    await settle()
    assert order == ["a", "a"] and gate.in_use == 2 and gate.waiting() == 1
    other = Holder(gate, "b", order)
    await settle()
    assert order[-1] == "b"  # a free slot, and b is under its share
    holders[0].release.set()
    await settle()
    assert order == ["a", "a", "b", "a"]  # a's third takes a's freed place
    for holder in [*holders, other]:
        holder.release.set()
    await asyncio.gather(*(h.task for h in [*holders, other]))
    assert gate.in_use == 0 and gate.waiting() == 0


async def test_waiting_clients_take_turns_not_arrival_order() -> None:
    gate, order = FairGate(total=1), []
    first = Holder(gate, "a", order)
    await settle()
    queued_a = [Holder(gate, "a", order) for _ in range(3)]
    await settle()
    queued_b = Holder(gate, "b", order)  # arrives after a's three
    await settle()
    first.release.set()
    await settle()
    queued_a[0].release.set()
    await settle()
    # a's next waiter ran, then b before a's remaining two, though b came after them.
    assert order[:3] == ["a", "a", "b"]
    for holder in [*queued_a, queued_b]:
        holder.release.set()
    await asyncio.gather(*(h.task for h in [first, *queued_a, queued_b]))
    assert order == ["a", "a", "b", "a", "a"]


async def test_a_cancelled_waiter_leaves_no_trace() -> None:
    gate, order = FairGate(total=1), []
    holder = Holder(gate, "a", order)
    await settle()
    waiter = Holder(gate, "b", order)
    await settle()
    waiter.task.cancel()
    await asyncio.gather(waiter.task, return_exceptions=True)
    assert gate.waiting() == 0
    holder.release.set()
    await holder.task
    assert gate.in_use == 0 and order == ["a"]


async def test_a_waiter_cancelled_as_it_is_granted_hands_the_slot_on() -> None:
    gate, order = FairGate(total=1), []
    holder = Holder(gate, "a", order)
    await settle()
    doomed, next_in_line = Holder(gate, "b", order), Holder(gate, "c", order)
    await settle()
    holder.release.set()
    await asyncio.sleep(0)  # a's exit grants b's future; b has not resumed yet
    doomed.task.cancel()
    await asyncio.gather(holder.task, doomed.task, return_exceptions=True)
    await settle()
    assert order == ["a", "c"]
    next_in_line.release.set()
    await next_in_line.task
    assert gate.in_use == 0


def test_a_share_of_zero_means_the_whole() -> None:
    assert share(8, 0) == 8 and share(8, 3) == 3 and share(8, 20) == 8


def test_a_refused_charge_is_not_charged_and_a_request_releases_its_bytes() -> None:
    budget = ByteBudget(total=100, per_client=60)
    with budget.account("a") as charge_a:
        charge_a(50)
        with pytest.raises(BudgetExceeded):
            charge_a(20)  # past a's share of 60
        with budget.account("b") as charge_b:
            charge_b(50)
            with pytest.raises(BudgetExceeded):
                charge_b(1)  # past the total
            assert budget.used == 100
        assert budget.used == 50
    assert budget.used == 0


def test_connections_past_either_bound_are_not_counted() -> None:
    counts = ConnectionCounts(total=3, per_client=2)
    assert counts.try_open("a") and counts.try_open("a")
    assert not counts.try_open("a")
    assert counts.try_open("b") and not counts.try_open("c")
    counts.close("a")
    assert counts.try_open("c") and counts.open == 3


def test_the_client_error_log_drops_lines_past_its_rate_and_counts_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import logging

    now = [0.0]
    log = RateLimitedLog(logging.getLogger("mediaref.serve.test"), 2, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, "mediaref.serve.test"):
        written = [log.info("refused %d", i) for i in range(5)]
        now[0] = 1.0
        log.info("refused later")
    assert written == [True, True, False, False, False]
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["refused 0", "refused 1", "refused later (3 similar lines dropped)"]
    assert not any(r.exc_info for r in caplog.records)


def test_a_clients_bodies_are_paced_after_their_burst_and_others_are_not() -> None:
    now = [0.0]
    rate = ClientRate(per_second=100, burst=300, clock=lambda: now[0])
    assert rate.pause("a", 300) == 0  # the burst
    assert rate.pause("a", 50) == pytest.approx(0.5)  # 50 bytes over: half a second at 100 B/s
    assert rate.pause("b", 300) == 0  # b has a bucket of its own
    now[0] = 10.0
    assert rate.pause("a", 300) == 0  # refilled, never past the burst
    assert ClientRate(per_second=0, burst=0).pause("a", 10**9) == 0  # unpaced


def test_an_uncontended_client_is_never_paced_and_owes_nothing() -> None:
    now = [0.0]
    rate = ClientRate(per_second=100, burst=300, clock=lambda: now[0])
    assert [rate.pause("a", 300, contended=False) for _ in range(5)] == [0.0] * 5
    # Its bucket emptied but ran up no debt: contended now, it waits for just what is over.
    assert rate.pause("a", 50) == pytest.approx(0.5)


def test_a_budget_knows_whether_others_hold_some_of_it() -> None:
    budget = ByteBudget(total=100)
    assert not budget.held_by_others("a")
    with budget.account("a") as charge_a:
        charge_a(10)
        assert not budget.held_by_others("a") and budget.held_by_others("b")
        with budget.account("b") as charge_b:
            charge_b(1)
            assert budget.held_by_others("a")
        assert not budget.held_by_others("a")


def test_client_shares_off_lift_every_share() -> None:
    from mediaref.serve.options import ServeOptions

    shared, router = ServeOptions(), ServeOptions(client_shares=False)
    assert shared.concurrency_per_client == 16 and shared.connections_per_client == 256
    assert shared.buffered_body_bytes_per_client == shared.buffered_body_bytes // 4
    assert shared.client_body_bytes_per_second > 0
    assert router.concurrency_per_client == 0 and router.connections_per_client == 0
    assert router.buffered_body_bytes_per_client == 0
    assert router.client_body_bytes_per_second == 0


async def test_a_clients_requests_share_one_semaphore_forgotten_when_idle() -> None:
    semaphores = ClientSemaphores(per_client=3)
    with semaphores.of("a") as first, semaphores.of("a") as second, semaphores.of("b") as other:
        assert first is second and first is not other
        assert first is not None and first._value == 3
    with semaphores.of("a") as again:
        assert again is not first  # the idle client's semaphore was let go
    with ClientSemaphores(per_client=0).of("a") as none:
        assert none is None


def test_the_startup_heap_is_frozen_out_of_the_collector() -> None:
    import gc

    from mediaref.serve.server import freeze_startup_heap

    before = gc.get_freeze_count()
    try:
        freeze_startup_heap()
        assert gc.get_freeze_count() > before
    finally:
        gc.unfreeze()


def test_a_rate_with_a_max_pause_caps_both_the_wait_and_the_debt() -> None:
    now = [0.0]
    rate = ClientRate(per_second=10, burst=20, max_pause=2.0, clock=lambda: now[0])
    pauses = [rate.pause("a", 1) for _ in range(500)]  # a flood, all at one instant
    assert pauses[:20] == [0.0] * 20 and max(pauses) == pytest.approx(2.0)
    now[0] = 2.0 + 20 / 10  # the capped debt repaid, and the burst refilled
    assert rate.pause("a", 1) == 0.0
