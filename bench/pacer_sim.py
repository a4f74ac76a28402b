"""The pacer in simulated time: every shape of ``bench/rate_limits.py`` in seconds, whatever the machine's load.

``bench/rate_limits.py`` runs the real SDKs against a loopback server in real time: the truth, but
on a busy machine its figures move by a third from run to run. This bench runs the same pacer
(``orbench.llm.ratelimit.Pacer``, through its public methods only), the same header and backoff
rules (``orbench.llm.providers.transport``, ``orbench.llm.clients.backoff``) and the same server
(``tests/fake_ratelimit.FakeRateLimited``'s ``decide``, its clock replaced by the simulation's)
as a discrete-event simulation: the rows of a run take their places among ``--concurrency``, a
refused request gives its place back while it waits (as ``Client._send`` does), and time jumps
from one event to the next. The same seed gives the same figures on any machine.

The client's own work is modelled as ``--cpu`` seconds per attempt on one event loop (attempts
queue for it, so a busy client's round trips stretch as a real one's do). What it leaves out: the
network, and ``--patience`` (nothing here waits that long). So it compares pacers, and the real
bench confirms on a quiet machine.

    python bench/pacer_sim.py                 # the named scenarios, the random 429s, two runs on one key
    python bench/pacer_sim.py --random 5      # ... and 5 seeds of every randomised shape
    python bench/pacer_sim.py --only cap-8
    python bench/pacer_sim.py --null          # 429s never cut: the ceiling for random 429s

The default ``--cpu 0.003`` is about the real client's work per attempt (3-5 ms); ``--cpu 0.01``
makes the client's CPU, not the window, the bottleneck at concurrency 32, which hides what cuts
cost (the figures of earlier versions of rate_limits.md were taken so).
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
from fake_ratelimit import FakeRateLimited, Shape  # noqa: E402 (tests/ is on sys.path above)
from rate_limits import PROMPT, Scenario, allowed_seconds, randomised, scenarios  # noqa: E402 (bench/ is on sys.path above)

from orbench.llm import clients, ratelimit  # noqa: E402 (after the sys.path set-up)
from orbench.llm.providers import transport  # noqa: E402 (after the sys.path set-up)


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
    waits: int = 0
    full: bool = False


@dataclass
class Run:
    """One stage run: ``rows`` rows through one pacer, ``concurrency`` row places, the retry loop
    of ``Client._send`` (a 429 or an overload waits as asked, else backs off, out of its place)."""

    sim: Simulation
    server: FakeRateLimited
    rows: int
    concurrency: int
    max_tokens: int = 100
    cpu: float = 0.0  # the client's seconds of work per attempt (one event loop: attempts queue for it)
    rpm: float | None = None
    done: int = 0
    finished_at: float | None = None
    refused: int = 0
    pacer: ratelimit.Pacer = None
    queue: deque = field(default_factory=deque)       # requests holding a place, waiting for the pacer
    place_queue: deque = field(default_factory=deque)  # requests waiting for a place
    pump_at: float = math.inf

    def __post_init__(self):
        self.pacer = ratelimit.Pacer("sim", self.rpm, clock=self.sim.clock.monotonic, ceiling=self.concurrency)
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

    # -- the pacer's queue --------------------------------------------------------------------
    def _enqueue(self, request: Request) -> None:
        request.full = bool(self.queue)
        self.queue.append(request)
        self._pump()

    def _pump(self) -> None:
        while self.queue:
            wait = self.pacer.wait_time()
            if wait > 0:
                self.queue[0].full = True  # it waited for the pacer: the pacer is what holds the sending back
                if wait < math.inf and self.sim.now + wait < self.pump_at:
                    self.pump_at = self.sim.now + wait
                    self.sim.at(self.pump_at, self._timed_pump)
                return
            request = self.queue.popleft()
            ticket = self.pacer.take(self.costs, request.full)
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
            latency = wait + self.server.latency()
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
        self.pacer.admitted(ticket, transport.budgets(headers))
        self.done += 1
        if self.done == self.rows:
            self.finished_at = self.sim.now
        self._place_freed()
        self._pump()

    def _refused(self, request: Request, ticket, headers, asked: float | None) -> None:
        self.refused += 1
        request.waits += 1
        wait = asked if asked is not None else clients.backoff(request.waits)
        self.pacer.refused(ticket, wait, transport.budgets(headers))
        self._wait_out(request, wait)

    def _overloaded(self, request: Request, ticket) -> None:
        request.waits += 1
        self.pacer.released(ticket)
        self._wait_out(request, clients.backoff(request.waits))

    def _wait_out(self, request: Request, wait: float) -> None:
        self._place_freed()  # its place goes to the next row while it waits
        self.sim.at(self.sim.now + wait, lambda: self._want_place(request))
        self._pump()


CPU = 0.003  # seconds of the client's work per attempt (SDK, runner): the real client's, measured against the bench


def simulate(shape: Shape, rows: int, concurrency: int, max_tokens: int = 100, runs: int = 1,
             seed: int = 0, limit: float = 3600.0, cpu: float | None = None) -> tuple[list[Run], FakeRateLimited]:
    """``runs`` runs of ``rows`` rows each against one server of ``shape`` (one key), together."""
    random.seed(seed)
    sim = Simulation()
    server = FakeRateLimited(shape)
    server._random = random.Random(shape.seed or seed)
    started = [Run(sim, server, rows, concurrency, max_tokens, CPU if cpu is None else cpu) for _ in range(runs)]
    sim.run(until=limit)
    return started, server


def row_for(s: Scenario, rows: int, seed: int) -> dict:
    rows = s.rows or rows
    [run], server = simulate(s.shape, rows, s.concurrency, s.max_tokens, seed=seed)
    wall = run.finished_at or math.inf
    stats = server.stats()
    refused = stats["rejected"] + stats["capped"]
    ideal = allowed_seconds(s, rows)
    return {"scenario": s.name, "rows": rows, "done": run.done, "wall": wall, "ratio": ideal / wall,
            "per_success": refused / max(1, stats["ok"]), "goal_429": 0.25 if s.bare else 0.10,
            "pacer": run.pacer.describe()}


def random429(rows: int, seeds: int) -> list[str]:
    """Throughput with a share of 429s at random against the same run with none (100 ms replies,
    ``Retry-After`` 0-1 s): the median of ``seeds`` seeds."""
    lines = []
    for share in (0.01, 0.05, 0.10, 0.15, 0.20, 0.30):
        ratios = []
        for seed in range(seeds):
            [base], _ = simulate(Shape(latency=0.1, jitter=0.3, seed=seed + 1), rows, 32, seed=seed)
            [run], _ = simulate(Shape(latency=0.1, jitter=0.3, random_429=share, seed=seed + 1), rows, 32, seed=seed)
            ratios.append(base.finished_at / run.finished_at if run.finished_at else 0.0)
        goal = "ok" if statistics.median(ratios) >= 0.8 or (share > 0.15 and min(ratios) > 0) else "MISSED"
        lines.append(f"random 429s {share:4.0%}: throughput {statistics.median(ratios):.2f} of none's "
                     f"(min {min(ratios):.2f}, {seeds} seeds): {goal} (>= 0.80 up to 15 %; above, it finishes)")
    return lines


def two_runs(rows: int, shape: Shape, seeds: int) -> str:
    """Two runs on one key, started together: their combined rate against the allowed one, and
    the last one's time against the first one's."""
    shares, evens = [], []
    for seed in range(seeds):
        runs, server = simulate(shape, rows, 32, runs=2, seed=seed)
        walls = sorted(r.finished_at or math.inf for r in runs)
        allowed = allowed_seconds(Scenario("two", shape, concurrency=64), 2 * rows)
        shares.append(allowed / walls[-1])
        evens.append(walls[-1] / walls[0])
    return (f"two runs on one key ({shape.style}): together {statistics.median(shares):.2f} of allowed "
            f"(min {min(shares):.2f}), the last {statistics.median(evens):.2f}x the first (max {max(evens):.2f}) "
            f"over {seeds} seeds (goals >= 0.85, <= 1.5x)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1000, help="rows per scenario that names none")
    parser.add_argument("--random", type=int, default=0, metavar="N", help="also N seeds of the randomised shapes")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per named scenario (median shown)")
    parser.add_argument("--only", default=None, help="comma-separated scenario name prefixes")
    parser.add_argument("--cpu", type=float, default=CPU, help="the client's seconds of work per attempt")
    parser.add_argument("--null", action="store_true",
                        help="a null pacer: 429s never cut the window (what rule 3 at best gets back on random 429s)")
    args = parser.parse_args(argv)
    globals()["CPU"] = args.cpu
    if args.null:
        ratelimit.Pacer._cut = lambda self, now, trigger, told=True: None
    started = real_time.perf_counter()
    found = scenarios() + [s for seed in range(args.random) for s in randomised(seed)]
    if args.only:
        found = [s for s in found if any(s.name.startswith(p) for p in args.only.split(","))]
    ratios, met = [], 0
    print(f"{'scenario':34s} {'rows':>5s} {'ratio':>6s} {'min':>6s} {'429/ok':>7s} {'goal':>5s}  pacer")
    for s in found:
        rows = [row_for(s, args.rows, seed) for seed in range(args.seeds)]
        ratio = statistics.median(r["ratio"] for r in rows)
        per = statistics.median(r["per_success"] for r in rows)
        ok = min(r["ratio"] for r in rows) >= 0.85 and max(r["per_success"] for r in rows) <= rows[0]["goal_429"]
        met += ok
        ratios.append(ratio)
        p = rows[0]["pacer"]
        print(f"{s.name:34s} {rows[0]['rows']:5d} {ratio:6.2f} {min(r['ratio'] for r in rows):6.2f} "
              f"{per:7.3f} {rows[0]['goal_429']:5.2f}  {'ok' if ok else 'MISSED':6s} window {p['window']}, "
              f"cuts {p['cuts']} ({p['cuts_undone']} undone), holds {p['holds']}", flush=True)
    if ratios:
        print(f"\n{met} of {len(found)} scenarios meet every goal; median ratio {statistics.median(ratios):.2f}, "
              f"lowest {min(ratios):.2f}")
    if not args.only:
        for line in random429(args.rows, args.seeds):
            print(line, flush=True)
        print(two_runs(1000, Shape(rpm=150, window=3, burst=1 / 60, reset="next", latency=0.05, jitter=0.3),
                       args.seeds))
        print(two_runs(1000, Shape(rpm=150, window=3, burst=1 / 60, style="none", latency=0.05, jitter=0.3),
                       args.seeds))
    print(f"({real_time.perf_counter() - started:.1f} s of this machine's time)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
