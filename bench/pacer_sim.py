"""Pacers side by side in simulated time: every shape of ``bench/rate_limits.py`` and issue 52's,
whatever the machine's load.

``bench/rate_limits.py`` runs the real SDKs against a loopback server in real time: the truth, but
on a busy machine its figures move by a third from run to run. This bench runs four controllers
through their public methods, each under the same retry rule (``orbench.llm.retry``) and header
reading (``orbench.llm.providers.transport``), against the same server
(``tests/fake_ratelimit.FakeRateLimited``'s ``decide``, its clock replaced by the simulation's),
as a discrete-event simulation: the rows of a run take their places among ``--concurrency``, a
refused request lends its place while it waits (as ``Client._send`` does), and time jumps from
one event to the next. The same seed gives the same figures on any machine. The controllers:

- ``orbench``: ``orbench.llm.ratelimit.Pacer``, as ``Client._send`` drives it;
- ``inspect``: inspect_ai's ``AdaptiveConcurrencyController`` as installed (imported, not copied;
  its default ``AdaptiveConcurrency``), as inspect's ``Model.generate`` drives it (a slot held
  across a request's retries; ``notify_retry`` on a 429, ``notify_success`` on a clean answer);
- ``fixed``: 10 requests in flight; ``none``: no pacer, ``--concurrency`` the only bound.

One table: each controller's share of the allowed rate, 429s per success, the last run's finish
over the first's (runs sharing a key) and error rows, and the issue's goals this pacer misses.

The client's own work is modelled as ``--cpu`` seconds per attempt on one event loop (attempts
queue for it, so a busy client's round trips stretch as a real one's do). ``--time_scale`` is the
real seconds a simulated one stands for, as the controllers' clocks read them (their constants
are in real seconds). What it leaves out: the network.

    python bench/pacer_sim.py                  # the issue's cases, four controllers, 3 seeds
    python bench/pacer_sim.py --random 4 --seeds 1 --controllers orbench,inspect
    python bench/pacer_sim.py --only shared- --time_scale 1
    python bench/pacer_sim.py --random 4 --seeds 1 --shared 2 --controllers orbench,inspect

The default ``--cpu 0.003`` is about the real client's work per attempt (3-5 ms).
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import math
import random
import statistics
import sys
import time as real_time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

import fake_ratelimit  # noqa: E402 (tests/ is put on sys.path just above)
import inspect_ai.util._concurrency as inspect_concurrency  # noqa: E402 (inspect's controller, as installed)
from fake_ratelimit import FakeRateLimited, Shape  # noqa: E402 (tests/ is on sys.path above)
from rate_limits import (  # noqa: E402 (bench/ is on sys.path above)
    PROMPT,
    RPM,
    SCALE,
    TPM,
    Scenario,
    allowed_seconds,
    per_minute,
    randomised,
    scenarios,
)

from orbench.llm import ratelimit, retry  # noqa: E402 (after the sys.path set-up)
from orbench.llm.providers import transport  # noqa: E402 (after the sys.path set-up)
from orbench.llm.types import Outcome  # noqa: E402 (after the sys.path set-up)


class Clock:
    """The simulation's time, standing in for the ``time`` module of the fake and the transport."""

    EPOCH = 1.8e9

    def __init__(self):
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.EPOCH + self.now


class Simulation:
    """Events in time order; ``run`` until none is left (or ``until``)."""

    def __init__(self):
        self.clock = Clock()
        self.events: list = []
        self.order = itertools.count()
        fake_ratelimit.time = transport.time = self.clock  # both read only monotonic() and time()

    @property
    def now(self) -> float:
        return self.clock.now

    def at(self, when: float, action) -> None:
        heapq.heappush(self.events, (max(when, self.now), next(self.order), action))

    def run(self, until: float = math.inf) -> None:
        while self.events and self.events[0][0] <= until:
            when, _, action = heapq.heappop(self.events)
            self.clock.now = when
            action()


@dataclass
class Request:
    row: int
    waits: int = 0  # failures so far (429s and overloads; the retry rule's attempts)
    full: bool = False
    first_failure: float | None = None
    ticket: object = None  # a slot held across its retries (inspect's model layer)
    retried: bool = False


class RealTime:
    """The real time a simulated moment stands for: ``TIME_SCALE`` x the simulation's (the shapes
    run ``bench/rate_limits.py``'s ``SCALE`` times faster than the real ones they model). The
    controllers' constants in seconds (inspect's 15 s cooldown) are real seconds; this pacer has
    none (it counts answers and round trips), only the waits that servers ask."""

    def __init__(self, clock: Clock):
        self.clock = clock

    def monotonic(self) -> float:
        return self.clock.now * TIME_SCALE

    def time(self) -> float:
        return Clock.EPOCH + self.clock.now * TIME_SCALE


def _real(budgets) -> list:
    return [b._replace(reset=None if b.reset is None else b.reset * TIME_SCALE) for b in budgets]


class OrbenchGate:
    """This project's pacer (``orbench.llm.ratelimit.Pacer``), driven as ``Client._send`` drives it,
    on the real time the simulation stands for (:class:`RealTime`)."""

    holds = False  # a refused request leaves the flight

    def __init__(self, run: Run):
        self.pacer = ratelimit.Pacer("sim", run.rpm, clock=RealTime(run.sim.clock).monotonic,
                                     ceiling=run.concurrency, longest_hold=PATIENCE)

    def wait_time(self) -> float:
        return self.pacer.wait_time() / TIME_SCALE

    def take(self, costs: dict, full: bool):
        return self.pacer.take(costs, full)

    def admitted(self, ticket, budgets, clean: bool) -> None:
        self.pacer.admitted(ticket, _real(budgets))

    def refused(self, ticket, asked, budgets) -> None:
        self.pacer.refused(ticket, None if asked is None else asked * TIME_SCALE, _real(budgets))

    def released(self, ticket, budgets=()) -> None:
        self.pacer.released(ticket, _real(budgets))

    def describe(self) -> str:
        d = self.pacer.describe()
        return f"window {d['window']}, cuts {d['cuts']}, holds {d['holds']}"


class _Slots:
    """A counter in place of the ``anyio.CapacityLimiter`` under inspect's controller: anyio's
    blocks in an event loop, this simulation has none; it takes a slot only when one is free."""

    def __init__(self, total: int):
        self.total_tokens, self.borrowed_tokens = total, 0

    async def acquire(self) -> None:
        self.borrowed_tokens += 1

    def release(self) -> None:
        self.borrowed_tokens -= 1


def _step(coroutine) -> None:
    """Run a coroutine that never suspends (the controller's slot wrapper over :class:`_Slots`)."""
    try:
        coroutine.send(None)
    except StopIteration:
        return
    raise RuntimeError("the coroutine suspended")


class InspectGate:
    """inspect_ai's ``AdaptiveConcurrencyController`` (imported, with its default
    ``AdaptiveConcurrency``: floor 10, start 20, cut x0.8, 15 s cooldown, +5 % a clean round),
    driven as inspect's ``Model.generate`` drives it: a request holds a connection slot
    (``controller.semaphore``) from its first attempt to its answer, its retries and their waits
    included; a 429 calls ``notify_retry(retry_after)``; an overload only marks the request
    retried; an answer with no retry calls ``notify_success()``. Its clock is the simulation's."""

    holds = True

    def __init__(self, run: Run):
        inspect_concurrency.time = RealTime(run.sim.clock)  # it reads time.monotonic() and time.time()
        self.controller = inspect_concurrency.AdaptiveConcurrencyController(
            "sim", inspect_concurrency.AdaptiveConcurrency(), visible=False)
        self.controller._limiter = _Slots(self.controller.concurrency)

    def wait_time(self) -> float:
        slots = self.controller._limiter
        return 0.0 if slots.borrowed_tokens < slots.total_tokens else math.inf

    def take(self, costs: dict, full: bool):
        _step(self.controller.semaphore.__aenter__())
        return "slot"

    def admitted(self, ticket, budgets, clean: bool) -> None:
        _step(self.controller.semaphore.__aexit__(None, None, None))
        if clean:
            self.controller.notify_success()

    def refused(self, ticket, asked, budgets) -> None:
        self.controller.notify_retry(asked)

    def released(self, ticket, budgets=()) -> None:  # the request gave up: its slot goes back
        _step(self.controller.semaphore.__aexit__(None, None, None))

    def describe(self) -> str:
        return f"limit {self.controller.concurrency}, changes {len(self.controller.history)}"


class FixedGate:
    """A fixed concurrency (``FIXED`` requests in flight, inspect's and many tools' default
    ``max_connections`` of 10), a refused request out of the flight while it waits."""

    holds = False

    def __init__(self, run: Run, slots: int | None = None):
        self.slots, self.in_flight = FIXED if slots is None else slots, 0

    def wait_time(self) -> float:
        return 0.0 if self.in_flight < self.slots else math.inf

    def take(self, costs: dict, full: bool):
        self.in_flight += 1
        return "slot"

    def admitted(self, ticket, budgets, clean: bool) -> None:
        self.in_flight -= 1

    def refused(self, ticket, asked, budgets) -> None:
        self.in_flight -= 1

    def released(self, ticket, budgets=()) -> None:
        self.in_flight -= 1

    def describe(self) -> str:
        return f"{self.slots} in flight"


class NoGate(FixedGate):
    """No pacer: every row in flight sends at once (``--concurrency`` the only bound)."""

    def __init__(self, run: Run):
        super().__init__(run, slots=10**9)

    def describe(self) -> str:
        return "no pacer"


FIXED = 10
TIME_SCALE = SCALE
GATES = {"orbench": OrbenchGate, "inspect": InspectGate, "fixed": FixedGate, "none": NoGate}
PATIENCE, MAX_RETRIES = 600.0, 5  # the flags' defaults


@dataclass
class Run:
    """One stage run: ``rows`` rows through one controller (``gate``), ``concurrency`` row places,
    the retry rule of ``Client._send`` (``orbench.llm.retry``) for every controller alike."""

    sim: Simulation
    server: FakeRateLimited
    rows: int
    concurrency: int
    max_tokens: int = 100
    cpu: float = 0.0  # the client's seconds of work per attempt (one event loop: attempts queue for it)
    rpm: float | None = None
    controller: str = "orbench"
    slower: float = 1.0  # its replies take this many times the shape's (longer answers)
    done: int = 0
    errors: int = 0
    finished_at: float | None = None
    refused: int = 0
    gate: object = None
    queue: deque = field(default_factory=deque)       # requests holding a place, waiting for the gate
    place_queue: deque = field(default_factory=deque)  # requests waiting for a place
    pump_at: float = math.inf

    def __post_init__(self):
        self.gate = GATES[self.controller](self)
        self.places = self.concurrency
        self.next_row = 0
        self.cpu_free = 0.0
        chars = len(PROMPT.format(i=0))
        self.costs = ratelimit.request_costs(math.ceil(chars / 4), self.max_tokens)
        self.server_costs = {"requests": 1.0, "tokens": math.ceil(chars / 4) + self.max_tokens}
        self.sim.at(0.0, self._spawn)

    # -- places among the --concurrency rows ------------------------------------------------
    def _spawn(self) -> None:
        while self.places and self.next_row < self.rows and not self.place_queue:
            self.places -= 1
            self._enqueue(Request(self.next_row))
            self.next_row += 1

    def _place_freed(self) -> None:
        self.places += 1
        if self.place_queue:
            self.places -= 1
            self._enqueue(self.place_queue.popleft())
        else:
            self._spawn()

    def _want_place(self, request: Request) -> None:
        if self.places and not self.place_queue:
            self.places -= 1
            self._enqueue(request)
        else:
            self.place_queue.append(request)

    # -- the gate's queue ---------------------------------------------------------------------
    def _enqueue(self, request: Request) -> None:
        if request.ticket is not None:  # it holds its slot across retries: straight out
            self._go(request, request.ticket)
            return
        request.full = bool(self.queue)
        self.queue.append(request)
        self._pump()

    def _pump(self) -> None:
        while self.queue:
            wait = self.gate.wait_time()
            if wait > 1e-9:  # a real clock's resolution: a wait shorter than a tick does not wait
                self.queue[0].full = True  # it waited for the gate: the gate is what holds the sending back
                if wait < math.inf and self.sim.now + wait < self.pump_at:
                    self.pump_at = self.sim.now + wait
                    self.sim.at(self.pump_at, self._timed_pump)
                return
            request = self.queue.popleft()
            ticket = self.gate.take(self.costs, request.full)
            request.ticket = ticket if self.gate.holds else None
            self._go(request, ticket)

    def _go(self, request: Request, ticket) -> None:
        self.cpu_free = max(self.sim.now, self.cpu_free) + self.cpu
        self.sim.at(self.cpu_free, lambda request=request, ticket=ticket: self._send(request, ticket))

    def _timed_pump(self) -> None:
        if self.sim.now >= self.pump_at:
            self.pump_at = math.inf
        self._pump()

    # -- the server ---------------------------------------------------------------------------
    def _send(self, request: Request, ticket) -> None:
        outcome, headers, wait = self.server.decide(self.server_costs)
        shape = self.server.shape
        if outcome == "ok":
            latency = wait + self.server.latency() * self.slower
            self.sim.at(self.sim.now + latency, lambda: self._answered(request, ticket, headers))
            return
        back = self.sim.now + shape.refuse_latency
        if outcome == "overloaded":
            self.sim.at(back, lambda: self._overloaded(request, ticket))
        else:
            asked = (wait if shape.style == "gemini" and outcome == "limited"
                     else transport.retry_after(headers))
            self.sim.at(back, lambda: self._refused(request, ticket, headers, asked))

    def _answered(self, request: Request, ticket, headers) -> None:
        self.server.done()
        self.gate.admitted(ticket, transport.budgets(headers), not request.retried)
        request.ticket = None
        self.done += 1
        self._row_ended()

    def _next_wait(self, request: Request, outcome: Outcome, asked: float | None):
        request.first_failure = self.sim.now if request.first_failure is None else request.first_failure
        request.waits += 1
        request.retried = True
        return retry.next_wait(outcome, asked, request.waits, self.sim.now - request.first_failure,
                               PATIENCE, MAX_RETRIES)

    def _refused(self, request: Request, ticket, headers, asked: float | None) -> None:
        self.refused += 1
        wait = self._next_wait(request, Outcome.RATE_LIMIT, asked)
        self.gate.refused(ticket, asked, transport.budgets(headers))
        self._wait_out(request, ticket, wait)

    def _overloaded(self, request: Request, ticket) -> None:
        wait = self._next_wait(request, Outcome.OVERLOAD, None)
        if not self.gate.holds:
            self.gate.released(ticket)
        self._wait_out(request, ticket, wait)

    def _wait_out(self, request: Request, ticket, wait) -> None:
        if isinstance(wait, retry.GiveUp):  # an error row
            if self.gate.holds:
                self.gate.released(ticket)
            request.ticket = None
            self.errors += 1
            self._row_ended()
            return
        if self.gate.holds:  # inspect: the sample keeps its place and its connection slot
            self.sim.at(self.sim.now + wait, lambda: self._enqueue(request))
            return
        self._place_freed()  # its place goes to the next row while it waits
        self.sim.at(self.sim.now + wait, lambda: self._want_place(request))
        self._pump()

    def _row_ended(self) -> None:
        if self.done + self.errors == self.rows:
            self.finished_at = self.sim.now
        self._place_freed()
        self._pump()


CPU = 0.003  # seconds of the client's work per attempt (SDK, runner): the real client's, measured against the bench


def simulate(shape: Shape, rows: int, concurrency: int, max_tokens: int = 100, runs: int = 1,
             seed: int = 0, limit: float = 3600.0, cpu: float | None = None,
             controller: str = "orbench", slower: float = 1.0) -> tuple[list[Run], FakeRateLimited]:
    """``runs`` runs of ``rows`` rows each against one server of ``shape`` (one key), together;
    the last one's replies take ``slower`` times as long."""
    random.seed(seed)
    sim = Simulation()
    server = FakeRateLimited(shape)
    server._random = random.Random(shape.seed or seed)
    started = [Run(sim, server, rows, concurrency, max_tokens, CPU if cpu is None else cpu,
                   controller=controller) for _ in range(runs)]
    started[-1].slower = slower
    sim.run(until=limit)
    return started, server


@dataclass
class Case:
    """A scenario of ``bench/rate_limits.py`` with how many runs share its key, and which goals
    apply: ``limit`` (a limit, no random 429s), ``shared`` (2 or 4 runs on one key), ``random``
    (429s at random at share ``random``: on top of a limit, or alone when the shape has none)."""

    scenario: Scenario
    runs: int = 1
    kind: str = "limit"
    slower: float = 1.0  # the last run's replies take this many times as long as the others'

    @property
    def name(self) -> str:
        return self.scenario.name

    @property
    def alone(self) -> bool:
        shape = self.scenario.shape
        return not (shape.rpm or shape.tpm or shape.cap)


def cases() -> list[Case]:
    """The issue's shapes: the named scenarios, Retry-After as an HTTP date, 2 and 4 runs on one
    key, limits with 2 and 5 % random 429s on top, random 429s alone."""
    short = {"burst": 1 / 60, "reset": "next", "latency": 0.05, "jitter": 0.3}
    found = [Case(s) for s in scenarios()]
    found.append(Case(Scenario("fixed-6s-date-c32", Shape(rpm=RPM / 60 * 6 / SCALE, window=6 / SCALE,
                                                          fixed=True, style="none", retry="date",
                                                          latency=0.05), rows=1500)))
    for runs in (2, 4):
        for style in ("openai", "none"):
            shape = Shape(rpm=150, window=3, style=style, **short)
            found.append(Case(Scenario(f"shared-{runs}x-{style}-c32", shape, rows=1000 // runs * 2),
                              runs, "shared"))
    # Honest headers on a budget the runs share: what rule 5's spread is for (before it, each run
    # counted the budget as its own; docs/rate_limits.md, rule 5).
    for runs in (2, 4):
        honest = [(f"shared-{runs}x-honest-rpm-c32", "openai", 32, 100, 1000 // runs * 2,
                   Shape(rpm=150, window=3, style="openai", latency=0.05, jitter=0.3)),
                  (f"shared-{runs}x-honest-tpm-anthropic-c64", "anthropic", 64, 1000, 600 // runs * 2,
                   per_minute(tpm=TPM, style="anthropic", latency=0.05, jitter=0.3)),
                  (f"shared-{runs}x-honest-long-replies-c32", "openai", 32, 100, 300 // runs * 2,
                   per_minute(600, latency=0.875, jitter=0.714))]
        for name, sdk, concurrency, max_tokens, rows, shape in honest:
            found.append(Case(Scenario(name, shape, sdk=sdk, concurrency=concurrency,
                                       max_tokens=max_tokens, rows=rows), runs, "shared"))
    for style in ("openai", "none"):  # rule 3's premise broken: one run's replies take 3x as long
        shape = Shape(rpm=150, window=3, style=style, **short)
        found.append(Case(Scenario(f"shared-2x-3x-rtt-{style}-c32", shape, rows=1000), 2, "shared",
                          slower=3.0))
    for share in (0.02, 0.05):
        for style in ("openai", "none"):
            shape = per_minute(RPM, style=style, random_429=share, random_retry=1 / SCALE,
                               latency=0.05, jitter=0.3)
            found.append(Case(Scenario(f"limit+{share:.0%}-random-{style}-c32", shape), kind="random"))
    # The same on a limit that allows 17 requests in flight, not 2.5 (500 requests a minute,
    # replies of 2 s): the window settles near 1 / (PROBE x share) whatever the limit allows
    wide = Shape(rpm=500, window=3, style="none", random_429=0.01, random_retry=1 / SCALE, **{**short, "latency": 0.1})
    found.append(Case(Scenario("limit+1%-random-wide-c32", wide), kind="random"))
    for share in (0.01, 0.05, 0.10, 0.20):
        shape = Shape(latency=0.1, jitter=0.3, random_429=share, random_retry=1 / SCALE, seed=1)
        found.append(Case(Scenario(f"random-{share:.0%}-alone-c32", shape), kind="random"))
    return found


def sharing(case: Case, runs: int, rows: int) -> Case:
    """``case`` with ``runs`` runs on its key, each of the shape's rows x 2 / ``runs`` (as the named
    shared cases split theirs): every shape's premise of one client on its limit broken."""
    s = case.scenario
    split = Scenario(f"{s.name}-{runs}x", s.shape, s.sdk, s.concurrency, s.max_tokens,
                     rows=(s.rows or rows) * 2 // runs)
    return Case(split, runs, "shared", case.slower)


def measure(case: Case, rows: int, seed: int, controller: str) -> dict:
    """One run of ``case`` by ``controller``: successful answers a second as a share of what the
    limit allows, 429s per success, the last run's finish over the first's, error rows."""
    s = case.scenario
    rows = s.rows or rows
    runs, server = simulate(s.shape, rows, s.concurrency, s.max_tokens, runs=case.runs, seed=seed,
                            controller=controller, slower=case.slower)
    walls = [r.finished_at or math.inf for r in runs]  # unfinished: its rows left count as errors
    done = sum(r.done for r in runs)
    stats = server.stats()
    allowed = allowed_seconds(Scenario(s.name, s.shape, s.sdk, s.concurrency * case.runs, s.max_tokens),
                              rows * case.runs)
    return {"ratio": done / max(walls) / (rows * case.runs / allowed),
            "per_success": (stats["rejected"] + stats["capped"]) / max(1, stats["ok"]),
            "spread": max(walls) / min(walls) if max(walls) < math.inf else math.inf,
            "errors": rows * case.runs - done,
            "state": runs[0].gate.describe()}


def summarise(case: Case, rows: int, seeds: int, controller: str) -> dict:
    """Medians over ``seeds`` seeds (the lowest share, the largest spread, all error rows)."""
    found = [measure(case, rows, seed, controller) for seed in range(seeds)]
    return {"ratio": statistics.median(f["ratio"] for f in found),
            "low": min(f["ratio"] for f in found),
            "per_success": statistics.median(f["per_success"] for f in found),
            "worst_429": max(f["per_success"] for f in found),
            "spread": max(f["spread"] for f in found), "errors": sum(f["errors"] for f in found),
            "state": found[0]["state"]}


def goals(case: Case, mine: dict, inspect: dict | None) -> list[str]:
    """The issue's goals this pacer's figures miss (empty: all met)."""
    missed = []
    bare = case.scenario.bare
    if case.kind == "limit":
        if mine["low"] < 0.85:
            missed.append("share < 0.85")
        if mine["worst_429"] > (0.25 if bare else 0.10):
            missed.append(f"429/ok > {0.25 if bare else 0.10}")
        if mine["errors"]:
            missed.append("error rows")
    elif case.kind == "shared":
        if mine["low"] < 0.85:
            missed.append("together < 0.85")
        if mine["spread"] > 1.3:
            missed.append("last/first > 1.3")
        if mine["worst_429"] > 0.15:
            missed.append("429/ok > 0.15")
    elif case.alone:
        if inspect is not None and mine["ratio"] < inspect["ratio"]:
            missed.append("below inspect's")
    else:
        share = case.scenario.shape.random_429
        if mine["low"] < 0.80:
            missed.append("share < 0.80")
        if mine["worst_429"] > share / (1 - share) + 0.10:
            missed.append(f"429/ok > {share / (1 - share) + 0.10:.2f}")
    if inspect is not None and inspect["ratio"] > mine["ratio"] + 0.05 and \
            inspect["per_success"] <= mine["per_success"]:
        missed.append("inspect ahead")
    return missed


def table(found: list[Case], rows: int, seeds: int, controllers: list[str]) -> tuple[int, int]:
    """Print one line per case: each controller's share, 429s per success, last/first and error
    rows, and the goals this pacer misses. Returns (cases meeting every goal, cases)."""
    head = " | ".join(f"{c}: share 429/ok last/first err" for c in controllers)
    print(f"| case | {head} | goals |")
    print("|---" * (len(controllers) + 2) + "|")
    met, limit_shares = 0, []
    for case in found:
        figures = {c: summarise(case, rows, seeds, c) for c in controllers}
        if case.kind == "limit" and "orbench" in figures:
            limit_shares.append(figures["orbench"]["ratio"])
        missed = goals(case, figures["orbench"], figures.get("inspect")) if "orbench" in figures else []
        met += not missed
        cells = " | ".join(
            f"{f['ratio']:.2f} {f['per_success']:.3f} "
            f"{f['spread']:.2f} {f['errors']}" if case.runs > 1 else
            f"{f['ratio']:.2f} {f['per_success']:.3f} - {f['errors']}" for f in figures.values())
        print(f"| {case.name} | {cells} | {'ok' if not missed else ', '.join(missed)} |", flush=True)
    if limit_shares:
        print(f"\nmedian share of the {len(limit_shares)} single limits with no random 429s: "
              f"{statistics.median(limit_shares):.2f} (goal 0.90)")
    return met, len(found)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1000, help="rows per scenario that names none")
    parser.add_argument("--random", type=int, default=0, metavar="N",
                        help="N seeds of the randomised shapes (instead of the named cases)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per case (medians shown)")
    parser.add_argument("--only", default=None, help="comma-separated case name prefixes")
    parser.add_argument("--shared", type=int, default=0, metavar="K",
                        help="K runs on every single limit's key instead of one, the rows split among "
                             "them (a run the shape's rows x 2 / K), judged by the shared-key goals")
    parser.add_argument("--cpu", type=float, default=CPU, help="the client's seconds of work per attempt")
    parser.add_argument("--time_scale", type=float, default=SCALE,
                        help="real seconds a simulated second stands for, as the controllers' clocks "
                             f"read it (default: {SCALE:g}, the shapes' own scale; 1: the bench's seconds)")
    parser.add_argument("--controllers", default=",".join(GATES),
                        help=f"which of {', '.join(GATES)} (orbench's goals need orbench; "
                             "'inspect ahead' needs inspect)")
    args = parser.parse_args(argv)
    globals()["CPU"] = args.cpu
    globals()["TIME_SCALE"] = args.time_scale
    controllers = args.controllers.split(",")
    started = real_time.perf_counter()
    if args.random:
        found = [Case(s) for seed in range(args.random) for s in randomised(seed)]
    else:
        found = cases()
    if args.only:
        found = [c for c in found if any(c.name.startswith(p) for p in args.only.split(","))]
    if args.shared:
        found = [sharing(c, args.shared, args.rows) for c in found if c.kind == "limit"]
    met, total = table(found, args.rows, args.seeds, controllers)
    print(f"\n{met} of {total} cases meet every goal that applies to this pacer "
          f"({args.seeds} seeds each, --cpu {args.cpu}, --time_scale {args.time_scale:g})")
    print(f"({real_time.perf_counter() - started:.1f} s of this machine's time)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
