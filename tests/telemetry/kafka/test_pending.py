"""One pending response, one cancellation rule: a cancelled future is answered as a failure."""

from __future__ import annotations

import asyncio

from telemetry.kafka.pending import Pending


def _collect(pending: Pending[int]) -> list[tuple[bytes, int]]:
    answers: list[tuple[bytes, int]] = []
    pending.add_done_callback(answers.append)
    return answers


async def _settled() -> None:
    for _ in range(3):  # done callbacks run on the loop's next iterations
        await asyncio.sleep(0)


async def test_a_result_is_answered() -> None:
    future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    answers = _collect(Pending(future, lambda n: (b"ok", n), lambda e: (b"failed", -1)))
    future.set_result(5)
    await _settled()
    assert answers == [(b"ok", 5)]


async def test_an_error_and_a_cancellation_are_both_failures() -> None:
    loop = asyncio.get_running_loop()
    seen: list[type[BaseException]] = []

    def failed(error: BaseException) -> tuple[bytes, int]:
        seen.append(type(error))
        return b"failed", 0

    broken: asyncio.Future[int] = loop.create_future()
    cancelled: asyncio.Future[int] = loop.create_future()
    answers: list[tuple[bytes, int]] = []
    Pending(broken, lambda n: (b"ok", n), failed).add_done_callback(answers.append)
    Pending(cancelled, lambda n: (b"ok", n), failed).add_done_callback(answers.append)
    broken.set_exception(OSError("disk gone"))
    cancelled.cancel()
    await _settled()
    assert seen == [OSError, asyncio.CancelledError]
    assert answers == [(b"failed", 0), (b"failed", 0)]


async def test_an_answer_that_is_itself_pending_is_followed() -> None:
    loop = asyncio.get_running_loop()
    first: asyncio.Future[int] = loop.create_future()
    second: asyncio.Future[int] = loop.create_future()
    inner = Pending(second, lambda n: (b"inner", n), lambda e: (b"failed", 0))
    answers = _collect(Pending(first, lambda n: inner, lambda e: (b"failed", 0)))
    first.set_result(1)
    await _settled()
    assert answers == []
    second.set_result(2)
    await _settled()
    assert answers == [(b"inner", 2)]
