"""Several addresses serving one model: ``--base_url URL1,URL2,...`` or ``--serve --replicas N``.

:class:`ReplicaClient` is the run's ``Client`` with one thin layer over it: the requests of the
replicated provider(s) go to one inner ``Client`` per address, the rest (a moderator ensemble's other
providers) as usual. What each part keeps:

- **Each address its own pacer.** The inner clients share the outer one's ``RateLimits`` (and its
  counters), whose pacers are per (provider, address, model): each replica's pacing, 429s and
  ``--rpm`` are its own, and the summary and meta file see them all.
- **``--concurrency`` per replica.** The runner keeps ``concurrency x replicas`` rows in flight
  (:func:`row_concurrency`); each pacer's window is bounded by ``--concurrency``.
- **Least loaded.** A request goes to the live replica with the fewest requests in flight (ties to
  the first listed). Premise: the replicas serve the same model on like hardware, so requests in
  flight is what tells them apart; join-the-shortest-queue is the usual dispatcher for identical
  servers (it needs no service-time estimate).
- **A replica that stops answering is taken out.** When a request to a replica fails (after that
  replica's own retries: the one retry loop, ``orbench.llm.clients``), the replica is asked once
  whether it is there (``GET /models``, :data:`PROBE_TIMEOUT` s). No answer at all: it is out for the
  rest of the run, and the request goes to another replica without costing its row anything. An
  answer, of any status: the failure was the request's own and is raised as it is (a bad key still
  stops the run; a 400 still fails its row).
- **When none is left.** If no replica has ever answered, the run stops (``FatalProviderError``:
  exit 2, naming the addresses); if some did and all are gone now, the request fails its row
  (``RowError``), so those rows wait for a rerun (exit 1) and every finished row is kept.

The cache does not know replicas: a request is keyed by the served model's identity
(``orbench.llm.serve``) or, for a ``--base_url`` list, by the sorted list of addresses, never by which
replica answered.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from orbench.llm.clients import Client
from orbench.llm.errors import FatalProviderError, RowError
from orbench.llm.models import redact
from orbench.llm.types import Completion, Request

logger = logging.getLogger(__name__)

#: Seconds a replica has to answer the "are you there" request after a failure: a live server's
#: ``/models`` is a table lookup; the request's own ``--timeout`` already ran out once if it hangs.
PROBE_TIMEOUT = 5.0


def split_addresses(text: str | None) -> list[str]:
    """``--base_url`` as a list of addresses (comma-separated; one or none)."""
    return [a.strip() for a in (text or "").split(",") if a.strip()]


def list_identity(addresses: list[str]) -> str:
    """The cache identity of a model served at every one of ``addresses`` (their order aside)."""
    return "replicas:" + ",".join(sorted(addresses))


def row_concurrency(concurrency: int, client) -> int:
    """The rows in flight for ``client``: ``concurrency`` per replica."""
    return concurrency * max(1, len(getattr(client, "replicas", ()) or ()))


@dataclass
class Replica:
    """One address and its traffic."""

    address: str
    client: Client
    in_flight: int = 0
    sent: int = 0
    answered: bool = False
    out: str | None = None  # why it was taken out

    def describe(self) -> dict:
        return {"base_url": redact(self.address), "answered": self.sent, "ever_answered": self.answered,
                "taken_out": self.out}


@dataclass
class _Route:
    providers: set[str] | None  # None: every provider (a --base_url list)
    identity: str
    replicas: list[Replica] = field(default_factory=list)


class ReplicaClient(Client):
    """A ``Client`` whose ``providers`` (None: all) are answered by one of ``addresses`` (module docstring)."""

    def __init__(self, addresses: list[str], identity: str, providers: set[str] | None = None, **settings):
        super().__init__(**{**settings, "base_url": addresses[0] if providers is None else settings.get("base_url")})
        inner = {k: v for k, v in settings.items() if k not in ("cache", "base_url")}
        self._route = _Route(providers, identity)
        for address in addresses:
            client = Client(cache=None, base_url=address, **inner)
            client.stats, client.rate_limits = self.stats, self.rate_limits  # one set of counters, a pacer per address
            self._route.replicas.append(Replica(address, client))

    @property
    def replicas(self) -> list[Replica]:
        return self._route.replicas

    def _replicated(self, request: Request) -> bool:
        providers = self._route.providers
        return providers is None or request.model.provider.name in providers

    def _slot(self, spec):
        slot = super()._slot(spec)
        if self._route.providers is None or spec.provider.name in self._route.providers:
            slot.endpoint = self._route.identity  # the cache key: the model, not which replica
        return slot

    def _pick(self) -> Replica | None:
        live = [r for r in self.replicas if r.out is None]
        return min(live, key=lambda r: r.in_flight) if live else None

    async def complete(self, request: Request) -> Completion:
        """The cache's answer, else the least loaded live replica's (module docstring)."""
        if not self._replicated(request):
            return await super().complete(request)
        hit = self.cached(request)
        if hit is not None:
            return hit
        while True:
            replica = self._pick()
            if replica is None:
                raise self._none_left()
            replica.in_flight += 1
            try:
                completion = await replica.client.complete(request)
            except (RowError, FatalProviderError) as exc:
                if await self._there(replica):
                    raise
                replica.out = f"stopped answering ({redact(str(exc))[:200]})"
                logger.warning("replica %s taken out: it does not answer; its requests go to the others",
                               redact(replica.address))
                continue
            finally:
                replica.in_flight -= 1
            replica.answered, replica.sent = True, replica.sent + 1
            if self.cache is not None:
                self.store(self.cache_key(request), completion)
            return completion

    async def _there(self, replica: Replica) -> bool:
        """Whether anything answers at ``replica``'s address (any HTTP status)."""
        import httpx  # here, not at the top: a tenth of a second every script would pay (only a lost replica asks)

        try:
            async with httpx.AsyncClient(timeout=PROBE_TIMEOUT) as http:
                await http.get(replica.address.rstrip("/") + "/models")
            return True
        except httpx.HTTPError:
            return False

    def _none_left(self) -> Exception:
        listed = "; ".join(f"{redact(r.address)}: {r.out}" for r in self.replicas)
        if not any(r.answered for r in self.replicas):
            return FatalProviderError(f"no replica has answered since the run started ({listed}): check the "
                                      f"addresses and that the servers are running")
        return RowError(f"every replica has stopped answering ({listed}); rerun to retry this row")

    def describe_replicas(self) -> list[dict]:
        """What the meta file records of the replicas: each address, its answers, whether it was taken out."""
        return [r.describe() for r in self.replicas]

    async def close(self) -> None:
        await super().close()
        for replica in self.replicas:
            await replica.client.close()
