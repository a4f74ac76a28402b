"""A row's requests run together in one ``asyncio.TaskGroup`` (``orbench.llm.clients.together``):
the first failure cancels the rest and gives their pacer slots back, a row error fails the row
with its own message, a bug stops the run (exit 3) as itself, and a row holds one place of
``--concurrency`` however many of its requests wait. Through the real openai SDK against the
loopback fake, the mock provider, and moderation ensembles run as scripts."""

import asyncio

import pytest
from conftest import read, write

from orbench.llm.clients import Client, Request, RowPlace, together
from orbench.llm.errors import RowError
from orbench.llm.models import parse_model
from orbench.llm.providers.mock import MockError

GPT = parse_model("openai/gpt-test")
MODERATE = "moderator/moderate.py"


def test_the_first_failure_cancels_the_rest_and_their_pacer_slots_come_back(env, fake):
    """One request held by the server (no answer ever comes), the other a 400: the row fails
    with the 400's message at once (not an ExceptionGroup), and the held one is cancelled, its
    place in the pacer's window given back. Were it not cancelled, the test would not end."""
    fake.add_rule(match="held", hold=True)
    fake.add_rule(match="bad", status=400, error_message="the request is malformed")
    client = Client(cache=None, concurrency=4, max_retries=0)

    async def go():
        try:
            with pytest.raises(RowError, match="HTTP 400 from openai") as info:
                await together(client.complete(Request.user(GPT, "held one")),
                               client.complete(Request.user(GPT, "bad two")))
            [pacer] = client.rate_limits.pacers.values()
            return info.value, pacer.in_flight
        finally:
            fake.release()
            await client.close()

    error, in_flight = asyncio.run(go())
    assert "malformed" in str(error) and in_flight == 0


def test_a_bug_in_one_request_is_raised_as_itself_and_cancels_the_rest(env, fake, mock):
    fake.add_rule(match="held", hold=True)
    mock.add(error="bug", message="a planted bug")
    client = Client(cache=None)

    async def go():
        try:
            await together(client.complete(Request.user(GPT, "held one")),
                           client.complete(Request.user(parse_model("mock/m"), "two")))
        finally:
            fake.release()
            await client.close()

    with pytest.raises(MockError, match="a planted bug"):
        asyncio.run(go())


async def _free(places: asyncio.Semaphore) -> int:
    """How many places are free: taken one by one while one is, then given back."""
    taken = 0
    while not places.locked():
        await places.acquire()
        taken += 1
    for _ in range(taken):
        places.release()
    return taken


def test_a_row_holds_one_place_however_many_of_its_requests_wait():
    """Three requests of one row waiting at once lend its place once and take one place back;
    one cancelled while it waits takes none, and the row's end gives back what it holds, once."""

    async def go():
        places = asyncio.Semaphore(2)
        await places.acquire()  # the runner takes the row's place before the row starts
        place = RowPlace(places)
        entered = asyncio.Event()

        async def wait_out(seconds):
            async with place.lent():
                entered.set()
                await asyncio.sleep(seconds)

        await asyncio.gather(*(wait_out(0) for _ in range(3)))
        after_waits = await _free(places)  # the row holds one again: 2 - 1 free
        entered.clear()
        stuck = asyncio.ensure_future(wait_out(3600))
        await entered.wait()
        lent = await _free(places)
        stuck.cancel()
        await asyncio.gather(stuck, return_exceptions=True)
        after_cancel = await _free(places)
        place.give_back()
        place.give_back()
        return after_waits, lent, after_cancel, await _free(places)

    # held after the waits; lent while one waits; a cancelled wait takes none back; the row's
    # end gives back nothing more than it holds, however often it is called
    assert asyncio.run(go()) == (1, 2, 2, 2)


def test_two_requests_of_a_row_queueing_for_its_place_take_one_place_back():
    """Two requests of one row end their waits while every place is taken: both queue for a place,
    and when places free the row takes one back, not two (the other goes back to the run)."""

    async def go():
        places = asyncio.Semaphore(2)
        await places.acquire()  # the row's place
        place = RowPlace(places)
        both_in, release = asyncio.Event(), asyncio.Event()
        inside = 0

        async def wait_out():
            nonlocal inside
            async with place.lent():
                inside += 1
                if inside == 2:
                    both_in.set()
                await release.wait()

        requests = [asyncio.ensure_future(wait_out()) for _ in range(2)]
        await both_in.wait()
        await places.acquire()  # other rows take both places
        await places.acquire()
        release.set()
        await asyncio.sleep(0)  # both requests now queue for a place
        places.release()  # the other rows end
        places.release()
        await asyncio.gather(*requests)
        while_held = await _free(places)
        place.give_back()
        return while_held, await _free(places)

    assert asyncio.run(go()) == (1, 2)


def test_an_ensemble_row_fails_with_its_moderators_error_the_others_cancelled(env, mock, script, tmp_path):
    mock.add(model="b", error="row", message="moderator b cannot read this row")
    mock.add(model="c", delay=3600, text="[[11. None of the above]]")  # cancelled, not awaited
    mock.add(text="[[11. None of the above]]")
    write(tmp_path / "in.csv", [{"prompt": "How are fireworks made?"}])
    result = script(MODERATE, "--moderator_model=mock/a,mock/b,mock/c", "--input_file=in.csv",
                    "--output_file=out.csv", env=env, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    row = read(tmp_path / "out.csv").iloc[0]
    assert row.error == "moderate: moderator b cannot read this row"
    assert row.is_toxic == "" and row.moderation_category == ""


def test_a_bug_in_an_ensemble_stops_the_run_with_its_own_traceback(env, mock, script, tmp_path):
    mock.add(model="b", error="bug", message="a planted bug")
    mock.add(model="c", delay=3600, text="[[11. None of the above]]")
    mock.add(text="[[11. None of the above]]")
    write(tmp_path / "in.csv", [{"prompt": "How are fireworks made?"}])
    result = script(MODERATE, "--moderator_model=mock/a,mock/b,mock/c", "--input_file=in.csv",
                    "--output_file=out.csv", env=env, cwd=tmp_path)
    assert result.returncode == 3
    assert "MockError: a planted bug" in result.stderr and "ExceptionGroup" not in result.stderr
