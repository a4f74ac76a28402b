"""Pacing to a provider's rate limits, and stopping when nothing answers.

The arithmetic of ``orbench.ratelimit`` (header reading, the budget model, the 429 waits) is
tested directly; the behaviour through the real openai and anthropic SDKs talking HTTP to
``tests/fake_ratelimit.py``, a loopback server that enforces requests and tokens per (tiny)
window with 429s, in both providers' header styles and with none.
"""

import asyncio
import json
import socket
import time
from datetime import datetime, timedelta, timezone

import pandas as pd
import pytest
from fake_ratelimit import FakeRateLimited

from orbench import ratelimit
from orbench.clients import Client, Request
from orbench.errors import FatalProviderError
from orbench.models import parse_model
from orbench.ratelimit import (
    Bucket,
    Pacer,
    Reachability,
    Reading,
    Ticket,
    parse_duration,
    read_limits,
)
from orbench.stages import check_alignment

ALIGN = "alignment_checker/check_alignment.py"


# -- arithmetic ------------------------------------------------------------------------------

@pytest.mark.parametrize("text, seconds", [
    ("6m0s", 360.0), ("20ms", 0.02), ("1s", 1.0), ("1.5s", 1.5), ("1m30.5s", 90.5), ("2h", 7200.0),
    ("0.25", 0.25), ("7", 7.0), ("", None), ("soon", None),
])
def test_durations_as_providers_write_them(text, seconds):
    assert parse_duration(text) == (pytest.approx(seconds) if seconds is not None else None)


def test_absolute_resets_rfc3339_http_date_and_epoch():
    now = 1_700_000_000.0
    moment = datetime.fromtimestamp(now + 12.5, tz=timezone.utc)
    assert parse_duration(moment.isoformat().replace("+00:00", "Z"), now) == pytest.approx(12.5)
    assert parse_duration("Tue, 14 Nov 2023 22:13:40 GMT", now) == pytest.approx(20.0)
    assert parse_duration(str(now + 3), now) == pytest.approx(3.0)
    past = (datetime.fromtimestamp(now, tz=timezone.utc) - timedelta(seconds=5)).isoformat()
    assert parse_duration(past, now) == 0.0


def test_openai_anthropic_and_other_header_families():
    openai, style = read_limits({"x-ratelimit-limit-requests": "3000", "x-ratelimit-remaining-requests": "2999",
                                 "x-ratelimit-reset-requests": "20ms", "x-ratelimit-limit-tokens": "1200000",
                                 "x-ratelimit-remaining-tokens": "1198970", "x-ratelimit-reset-tokens": "51ms",
                                 "content-type": "application/json"})
    assert style == "openai"
    assert openai == {"requests": Reading(3000, 2999, pytest.approx(0.02)), "tokens": Reading(1200000, 1198970, pytest.approx(0.051))}
    later = datetime.now(timezone.utc) + timedelta(seconds=30)
    anthropic, style = read_limits({
        "anthropic-ratelimit-requests-limit": "50", "anthropic-ratelimit-requests-remaining": "49",
        "anthropic-ratelimit-requests-reset": later.isoformat(),
        "anthropic-ratelimit-input-tokens-limit": "40000", "anthropic-ratelimit-output-tokens-remaining": "7000",
        "anthropic-ratelimit-tokens-limit": "48000"})
    assert style == "anthropic"
    assert set(anthropic) == {"requests", "input-tokens", "output-tokens", "tokens"}
    assert anthropic["requests"].reset == pytest.approx(30, abs=1)
    assert anthropic["input-tokens"].limit == 40000 and anthropic["output-tokens"].remaining == 7000
    bare, style = read_limits({"x-ratelimit-limit": "60", "x-ratelimit-remaining": "59", "x-ratelimit-reset": "1"})
    assert style == "openai" and bare == {"requests": Reading(60, 59, 1.0)}
    ietf, style = read_limits({"RateLimit": "limit=100, remaining=40, reset=6"})
    assert style == "ietf" and ietf == {"requests": Reading(100, 40, 6.0)}
    mistral, _ = read_limits({"x-ratelimit-limit-req-minute": "120", "x-ratelimit-remaining-tokens-minute": "9"})
    assert mistral == {"requests-per-minute": Reading(limit=120), "tokens-per-minute": Reading(remaining=9)}


def test_costs_count_prompt_characters_over_four_plus_max_tokens():
    assert ratelimit.request_costs(401, 1000) == {"requests": 1.0, "tokens": 1101.0, "input-tokens": 101.0,
                                                  "output-tokens": 1000.0}


def test_bucket_rate_from_remaining_and_reset_and_level_net_of_later_sends():
    bucket = Bucket()
    bucket.sent = 10.0  # ten sent so far; the observed request was the 6th
    bucket.observe(Reading(limit=100, remaining=80, reset=2.0), sent_at=5.0, sent_before=6.0, now=5.5)
    assert bucket.rate == pytest.approx(10.0)  # (100 - 80) / 2 s: 10 per second refill
    assert bucket.level == pytest.approx(80 + 10 * 0.5 - 4)  # refilled since sent, minus 4 sent after
    # Room for 81 now (level 81, margin 2): a request of 1 goes at once...
    assert bucket.wait(1, now=5.5, scale=1.0) == 0.0
    bucket.take(81, now=5.5, scale=1.0)
    # ...then the next waits for the refill: (1 + 2 margin - 0) / 10 per second.
    assert bucket.wait(1, now=5.5, scale=1.0) == pytest.approx(0.3)
    assert bucket.wait(1, now=5.5, scale=0.5) == pytest.approx(0.6)


def _ticket(pacer: Pacer, tokens: int = 0) -> Ticket:
    return Ticket(pacer, ratelimit.request_costs(4 * tokens, 0))


def test_429_waits_prefer_retry_after_ms_then_retry_after_then_the_budget():
    pacer = Pacer("openai", None, "m")
    ticket = _ticket(pacer)
    assert pacer.observe(ticket, 429, {"retry-after-ms": "250", "retry-after": "1"}) == pytest.approx(0.25)
    assert pacer.observe(ticket, 429, {"retry-after": "2"}) == pytest.approx(2.0)
    waited = pacer.observe(ticket, 429, {"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "0",
                                         "x-ratelimit-reset-requests": "6s"})
    assert waited == pytest.approx(1 / (10 * pacer.scale))  # one request's worth of a 10/s refill
    assert pacer.responses_429 == 3 and pacer.observe(ticket, 200, {}) is None


def test_without_headers_the_rate_is_cut_on_a_429_and_grows_back():
    pacer = Pacer("openai", None, "m")
    start = ratelimit.clock()
    for i in range(40):  # 20 answers a second for two seconds
        pacer.successes.append(start - 2 + i * 0.05)
    ticket = _ticket(pacer)
    ticket.sent_at = start
    wait = pacer.observe(ticket, 429, {})
    assert pacer.aimd_rate == pytest.approx(20 * 0.85, rel=0.1)
    assert 0 < wait <= 1.0
    cut = pacer.aimd_rate
    again = _ticket(pacer)
    again.sent_at = start - 1  # sent before the cut: the same congestion, no second cut
    pacer.observe(again, 429, {})
    assert pacer.aimd_rate == cut
    for _ in range(100):
        pacer.observe(ticket, 200, {})
    assert pacer.aimd_rate == pytest.approx(cut * 1.002 ** 100)


def _headers(limit: int, remaining: int, reset: str) -> dict:
    return {"x-ratelimit-limit-requests": str(limit), "x-ratelimit-remaining-requests": str(remaining),
            "x-ratelimit-reset-requests": reset}


def test_a_short_window_is_learned_and_paced_evenly_without_cutting_the_refill():
    pacer = Pacer("openai", None, "m")
    ticket = _ticket(pacer)
    pacer.observe(ticket, 200, _headers(60, 50, "1s"))  # 60 a minute, refilling 10 per second
    assert pacer.buckets["requests"].rate == pytest.approx(10.0)
    # A 429 while the headers say 48 are left: the provider lets only a few through at once.
    later = _ticket(pacer)
    later.sent_at = ratelimit.clock()
    pacer.observe(later, 429, {**_headers(60, 48, "1.2s"), "retry-after-ms": "50"})
    bucket = pacer.buckets["requests"]
    assert bucket.hidden == 48 and bucket.cap() == 12
    assert bucket.pace == ratelimit._SHORT_PACE and pacer.scale == 1.0
    # The bucket now keeps its own count: a reply's rounded "remaining" does not re-anchor it.
    bucket.level, bucket.at = 5.0, ratelimit.clock()
    pacer.observe(_ticket(pacer), 200, _headers(60, 59, "0.1s"))
    assert bucket.level == 5.0
    # A later 429 with no room left is mostly timing: a gentle cut only, the level is spent, and
    # the next request waits its share at just under the reported refill.
    again = _ticket(pacer)
    again.sent_at = ratelimit.clock()
    pacer.observe(again, 429, {**_headers(60, 48, "1.2s"), "retry-after-ms": "20"})
    assert pacer.scale == pytest.approx(ratelimit._SHORT_DECREASE)
    assert bucket.level == 0.0
    assert bucket.wait(1, now=bucket.at, scale=pacer.scale) == pytest.approx(
        min(1 + 0.02 * 60, 12) / (bucket.rate * ratelimit._SHORT_DECREASE * ratelimit._SHORT_PACE))


def test_slow_start_holds_requests_until_the_first_reply():
    async def scenario():
        pacer = Pacer("openai", None, "m")
        tickets = [_ticket(pacer) for _ in range(ratelimit.SLOW_START + 2)]
        first = [asyncio.ensure_future(pacer.acquire(t)) for t in tickets]
        await asyncio.sleep(0.05)
        sent = sum(task.done() for task in first)
        held_before = pacer.waited_requests
        pacer.observe(tickets[0], 200, {})  # the first reply, even without limits, opens up
        await asyncio.wait_for(asyncio.gather(*first), 5)
        return sent, held_before, pacer.waited_requests, pacer.slow_starting

    sent, held_before, held_after, slow = asyncio.run(scenario())
    assert sent == ratelimit.SLOW_START and held_before == 0
    assert held_after == 0 and slow is False  # not a wait for the provider's limit


def test_reachability_stops_only_when_nothing_ever_answered():
    class ConnectError(Exception):
        pass

    cold, warm = Reachability(), Reachability()
    warm.note_reply()
    for _ in range(10):
        warm.note_failure(ConnectError("refused"))  # a blip in a healthy run: retried as usual
    for _ in range(3):
        cold.note_failure(ConnectError("All connection attempts failed"))
    assert cold.dead and not warm.dead and "connection attempts failed" in cold.reason
    assert ratelimit.is_connect_failure(ConnectError()) and not ratelimit.is_connect_failure(ValueError())


# -- through the real SDKs -------------------------------------------------------------------

@pytest.fixture
def limited(env, monkeypatch):
    """A rate-limited fake factory; every provider pointed at it."""
    servers = []

    def start(**kwargs) -> FakeRateLimited:
        server = FakeRateLimited(**kwargs).start()
        servers.append(server)
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        env.update(OPENAI_BASE_URL=server.url + "/v1", ANTHROPIC_BASE_URL=server.url)
        return server

    yield start
    for server in servers:
        server.stop()


def _input(tmp_path, n: int):
    prompts = [f"Row {i:04d}: how do smoke detectors work?" for i in range(n)]
    pd.DataFrame({"prompt": prompts, "category": "harmful"}).to_csv(tmp_path / "in.csv", index=False)
    return prompts


def _run(script, env, model: str, *extra: str):
    return script(ALIGN, "--model", model, "--input_file", "in.csv", "--output_file", "out.csv",
                  "--no_cache", *extra, env=env)


@pytest.mark.parametrize("model, style, limits", [
    ("openai/gpt-test", "openai", {"rpm": 30}),
    ("anthropic/claude-test", "anthropic", {"tpm": 3000}),   # max_tokens 100: ~25 a window
    ("openai/gpt-test", "none", {"rpm": 30}),
])
def test_a_run_at_the_limit_has_no_error_row_and_records_the_429s(script, env, limited, tmp_path,
                                                                  model, style, limits):
    server = limited(window=1.0, style=style, burst=0.3 if style == "none" else 1.0, **limits)
    prompts = _input(tmp_path, 60)
    # --max_retries 0: a 429 handed to the SDK would fail its row at once.
    proc = _run(script, env, model, "--concurrency", "16", "--max_retries", "0", "--max_tokens", "100")
    assert proc.returncode == 0, proc.stderr
    out = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)
    assert (out.error == "").all() and list(out.response) == [f"Fake answer to: {p}" for p in prompts]
    meta = json.loads((tmp_path / "out.csv.meta.json").read_text())
    [paced] = meta["rate_limits"]
    assert (paced["provider"], paced["model"]) == (model.split("/")[0], model.split("/")[1])
    assert paced["responses_429"] == server.rejected == meta["requests"]["rate_limit_429s"]
    assert paced["passed_to_sdk_after_patience"] == 0
    assert server.ok == 60
    if style == "none":
        assert paced["limits_seen"] == {} and paced["header_style"] is None
        assert server.rejected > 0 and paced["adaptive_requests_per_minute"] > 0
    else:
        assert paced["header_style"] == style
        kind = "requests" if "rpm" in limits else "tokens"
        seen = paced["limits_seen"][kind]
        assert seen["limit"] == next(iter(limits.values()))
        assert seen["refill_per_minute"] == pytest.approx(seen["limit"] * 60, rel=0.1)
        assert server.rejected <= 15  # paced from the headers (the bench measures the rate goals)
    assert "paced by the provider's rate limit" in proc.stderr


def test_patience_bounds_the_wait_then_the_429_is_an_error(script, env, limited, tmp_path):
    server = limited(window=100.0, rpm=2, style="openai")
    _input(tmp_path, 4)
    started = time.monotonic()
    proc = _run(script, env, "openai/gpt-test", "--max_retries", "0", "--patience", "0.5")
    assert proc.returncode == 1 and time.monotonic() - started < 30
    out = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)
    assert (out.error != "").sum() == 2 and out.error[out.error != ""].str.contains("HTTP 429").all()
    meta = json.loads((tmp_path / "out.csv.meta.json").read_text())
    assert meta["rate_limits"][0]["passed_to_sdk_after_patience"] == 2 and server.ok == 2


def test_both_sdks_share_the_transport_hook_and_pace_per_model(env, limited):
    limited(window=1.0, rpm=10, style="openai", burst=0.2)
    client = Client(cache=None, concurrency=8, max_retries=0)
    gpt, other = parse_model("openai/a"), parse_model("openai/b")

    async def go():
        try:
            return await asyncio.gather(*(client.complete(Request.user(m, f"q{i}", max_tokens=5))
                                          for i in range(12) for m in (gpt, other)))
        finally:
            await client.close()

    answers = asyncio.run(go())
    assert len(answers) == 24 and all(a.text.startswith("Fake answer") for a in answers)
    assert sorted(p["model"] for p in client.rate_limits.describe()) == ["a", "b"]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_closed_port_stops_the_run_within_seconds_keeping_finished_rows(script, env, fake, tmp_path):
    _input(tmp_path, 200)
    first = _run(script, env, "openai/gpt-test", "--limit", "5")
    assert first.returncode == 0 and fake.count() == 5
    dead = f"http://127.0.0.1:{_closed_port()}/v1"
    started = time.monotonic()
    proc = _run(script, {**env, "OPENAI_BASE_URL": dead}, "openai/gpt-test")
    took = time.monotonic() - started
    assert proc.returncode == 2 and took < 15, (took, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: cannot connect to openai at {dead}"), lines
    assert "check the address" in lines[0]
    progress = (tmp_path / "out.csv.progress.jsonl").read_text().splitlines()
    assert sum(1 for line in progress if json.loads(line).get("error", "") is None) == 5  # after the settings line
    rerun = _run(script, env, "openai/gpt-test")  # the server is back: only the rest is asked
    assert rerun.returncode == 0 and fake.count() == 200


def test_a_404_from_a_base_url_without_v1_says_so(script, env, fake, tmp_path):
    fake.add_rule(status=404, error_message="Not Found")
    _input(tmp_path, 3)
    proc = _run(script, {**env, "OPENAI_BASE_URL": fake.url}, "openai/gpt-test")
    assert proc.returncode == 2
    assert "has no /v1 in it" in proc.stderr and f"try {fake.url}/v1" in proc.stderr
    with_v1 = _run(script, env, "openai/gpt-test")
    assert with_v1.returncode == 2 and "/v1 in it" not in with_v1.stderr


def test_patience_flag_is_documented(capsys):
    with pytest.raises(SystemExit):
        check_alignment.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--patience PATIENCE seconds one request may keep waiting out the provider's rate limit" in text


def test_unreachable_client_raises_fatal_error(env):
    client = Client(cache=None, max_retries=5, base_url=f"http://127.0.0.1:{_closed_port()}/v1")

    async def go():
        try:
            await client.complete(Request.user(parse_model("openai/gpt-test"), "hi"))
        finally:
            await client.close()

    started = time.monotonic()
    with pytest.raises(FatalProviderError, match="cannot connect to openai"):
        asyncio.run(go())
    assert time.monotonic() - started < 15
