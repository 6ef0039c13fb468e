"""What a run's model usage cost, and its budget: the one home of ``genai-prices``.

A price is looked up only where it is known for sure, never guessed:
- a model ref ``provider:model_id`` served from a provider's own address is priced by the
  provider the address names (a runtime with a ``base_url``: genai-prices matches it
  against each provider's API address), else by the provider its prefix names;
- an offline runtime (the ``test`` model), replayed turns, a bare model name, a local
  server (a plain-http ``base_url``: ``local:llama3`` at 127.0.0.1), an address
  genai-prices does not know or a model it does not list has no price: its tokens are
  counted and its cost is "unknown".

Prices come from the data genai-prices ships (its bundled snapshot); nothing is fetched
at run time (its ``UpdatePrices`` is never started). The library is loaded on the first
model that may have a price (about 0.3 s), so offline and local runs never load it.

A ``budget`` (``max_cost_usd``) is checked before each model call against the cost so far:
once it is reached the run stops with ``BudgetExceededError`` (kind "spent"). A model with no
known price cannot be counted against a budget, so calling one under a budget stops the
run before the call (kind "unpriced"), except the offline ``test`` model and replayed turns,
which spend nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING

from ..errors import BudgetExceededError
from ..json_types import JSONObject, JSONValue
from ..runtimes.protocol import Usage
from ..runtimes.rules import split_model_ref

if TYPE_CHECKING:
    from ..runtimes.protocol import AgentRuntimeProtocol

__all__ = [
    "CostMeter",
    "PriceKey",
    "cost_text",
    "price_key",
    "price_usd",
    "spends_nothing",
    "sum_costs",
    "usage_line",
]


@dataclass(frozen=True, slots=True)
class PriceKey:
    """Where a model's price is looked up: a provider id, or the address it is served from."""

    model_id: str
    provider_id: str | None = None
    api_url: str | None = None


def price_key(model_ref: str, runtime: AgentRuntimeProtocol | None = None) -> PriceKey | None:
    """How ``model_ref`` served by ``runtime`` is priced; None when it has no price."""
    runtime = _behind_wrappers(runtime)
    if runtime is not None and spends_nothing(runtime):
        return None
    provider, model_id = split_model_ref(model_ref)
    if provider is None or not model_id:
        return None
    settings = getattr(runtime, "settings", None)
    base_url = getattr(settings, "base_url", None)
    if isinstance(base_url, str) and base_url:
        # Every provider's own API is https; a plain-http server is a local one (Ollama,
        # vLLM, a test's loopback server), priced at nothing known without loading the data.
        if not base_url.lower().startswith("https://"):
            return None
        return PriceKey(model_id, api_url=base_url)
    return PriceKey(model_id, provider_id=provider)


def _behind_wrappers(runtime: AgentRuntimeProtocol | None) -> AgentRuntimeProtocol | None:
    while runtime is not None and hasattr(runtime, "inner"):
        runtime = runtime.inner  # a recording wrapper: the runtime behind it decides
    return runtime


def spends_nothing(runtime: AgentRuntimeProtocol) -> bool:
    """Whether turns of ``runtime`` cost nothing: the offline ``test`` model, or turns
    replayed from recordings."""
    served = _behind_wrappers(runtime)
    return bool(getattr(served, "offline", False)) or (
        getattr(served, "runtime_id", None) == "replay"
    )


def price_usd(key: PriceKey, usage: Usage) -> Decimal | None:
    """What ``usage`` costs at ``key``'s price, in USD; None when no price is known."""
    # Loaded on first use: about 0.5 s, paid only by runs on a model that may be priced.
    from genai_prices import Usage as PriceUsage
    from genai_prices import calc_price

    counted = PriceUsage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read,
        cache_write_tokens=usage.cache_create,
    )
    try:
        if key.api_url is not None:
            found = calc_price(counted, key.model_id, provider_api_url=key.api_url)
        else:
            found = calc_price(counted, key.model_id, provider_id=key.provider_id)
    except LookupError:  # no such provider or model in the price data
        return None
    except ValueError:  # usage its price cannot take (e.g. tiers it does not know)
        return None
    return found.total_price


@dataclass(eq=False, slots=True)
class _Spend:
    """What one model of a run used, and what that cost."""

    usage: Usage = field(default_factory=Usage)
    key: PriceKey | None = None
    #: The cost of ``usage``; None when no price is known.
    usd: Decimal | None = None
    #: Served offline or replayed (``spends_nothing``): no cost, but no price to show.
    offline: bool = False


class CostMeter:
    """A run's usage per model, its cost, and its budget (``max_cost_usd``; None: none).

    Given to the run's ``Runtime`` as its ``meter``: told of every reply's usage and asked
    before every request.
    """

    def __init__(self, max_cost_usd: float | None = None) -> None:
        self.max_cost_usd = max_cost_usd
        self._spends: dict[str, _Spend] = {}
        self._prices: dict[PriceKey, bool] = {}

    def _spend(self, model_ref: str, runtime: AgentRuntimeProtocol | None) -> _Spend:
        spend = self._spends.get(model_ref)
        if spend is None:
            key = price_key(model_ref, runtime)
            offline = runtime is not None and spends_nothing(runtime)
            spend = self._spends[model_ref] = _Spend(key=key, offline=offline)
        return spend

    def _has_price(self, key: PriceKey | None) -> bool:
        if key is None:
            return False
        known = self._prices.get(key)
        if known is None:
            known = self._prices[key] = price_usd(key, Usage()) is not None
        return known

    # --- the runtime's meter ------------------------------------------------------------

    def before_call(self, model_ref: str, runtime: AgentRuntimeProtocol) -> None:
        """Stop the run when its budget is spent, or cannot be counted for ``model_ref``."""
        limit = self.max_cost_usd
        if limit is None:
            return
        spend = self._spend(model_ref, runtime)
        if spend.offline:
            return
        if not self._has_price(spend.key):
            raise BudgetExceededError(
                f"model '{model_ref}' has no known price, so the run's budget "
                f"(max_cost_usd: {limit}) cannot be counted; the run stopped before calling "
                "it. Remove 'budget:' to run models without a price (local servers, models "
                "genai-prices does not list)",
                kind="unpriced",
                spent_usd=self.spent_usd(),
                max_cost_usd=limit,
            )
        spent = self.spent_usd()
        if spent is not None and spent >= limit:
            raise BudgetExceededError(
                f"the run's budget is spent: ${spent:.6f} of max_cost_usd {limit}; the run "
                f"stopped before calling '{model_ref}' again. Raise 'budget: "
                "{max_cost_usd: …}' to let it go on",
                kind="spent",
                spent_usd=spent,
                max_cost_usd=limit,
            )

    def add(self, model_ref: str, runtime: AgentRuntimeProtocol, usage: Usage) -> None:
        """Count ``usage`` against ``model_ref`` and price the total so far."""
        spend = self._spend(model_ref, runtime)
        spend.usage = spend.usage + usage
        if spend.key is not None:
            spend.usd = price_usd(spend.key, spend.usage)

    # --- what the run reports -----------------------------------------------------------

    def spent_usd(self) -> float | None:
        """What the run has spent so far in USD, offline models counting nothing; None when
        a model that answered has no known price."""
        total = Decimal(0)
        for spend in self._spends.values():
            if spend.offline or spend.usage.total_tokens == 0:
                continue  # offline, or asked but never answered: nothing spent
            if spend.usd is None:
                return None
            total += spend.usd
        return float(total)

    def to_dict(self) -> JSONObject:
        """The run's ``cost``: ``usd`` (None: unknown, as for any model without a price, the
        offline ``test`` model included) and each model's tokens and cost."""
        models: list[JSONValue] = []
        total: Decimal | None = Decimal(0)
        for model_ref, spend in self._spends.items():
            if spend.usage.total_tokens == 0:
                continue
            usd = None if spend.usd is None else float(spend.usd)
            models.append(
                {
                    "model": model_ref,
                    "input_tokens": spend.usage.input_tokens,
                    "output_tokens": spend.usage.output_tokens,
                    "usd": usd,
                }
            )
            total = None if total is None or spend.usd is None else total + spend.usd
        out: JSONObject = {"usd": None if total is None else float(total), "models": models}
        if self.max_cost_usd is not None:
            out["max_cost_usd"] = self.max_cost_usd
        return out


def cost_text(cost: object) -> str:
    """A record's ``cost`` in words: ``$0.000123``, or ``cost unknown (test)``."""
    if not isinstance(cost, dict):
        return "cost unknown"
    usd = cost.get("usd")
    if isinstance(usd, int | float):
        return f"${usd:.6f}" if usd < 0.01 else f"${usd:.4f}"
    models = cost.get("models")
    unpriced = [
        str(m.get("model"))
        for m in (models if isinstance(models, list) else [])
        if isinstance(m, dict) and m.get("usd") is None
    ]
    return "cost unknown" + (f" ({', '.join(unpriced)})" if unpriced else "")


def sum_costs(costs: Iterable[object]) -> JSONObject:
    """Several records' ``cost`` as one: each model's tokens and cost added up; ``usd`` None
    when any model's price is unknown."""
    models: dict[str, dict[str, JSONValue]] = {}
    for cost in costs:
        listed = cost.get("models") if isinstance(cost, dict) else None
        for entry in listed if isinstance(listed, list) else []:
            if not isinstance(entry, dict):
                continue
            name = str(entry.get("model"))
            into = models.setdefault(
                name, {"model": name, "input_tokens": 0, "output_tokens": 0, "usd": 0.0}
            )
            for key in ("input_tokens", "output_tokens"):
                into[key] = _number(into[key]) + _number(entry.get(key))
            usd, known = entry.get("usd"), into["usd"]
            into["usd"] = (
                known + usd
                if isinstance(known, int | float) and isinstance(usd, int | float)
                else None
            )
    total: float | None = 0.0
    for entry in models.values():
        usd = entry["usd"]
        total = total + usd if total is not None and isinstance(usd, int | float) else None
    return {"usd": total, "models": list(models.values())}


def _number(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def usage_line(cost: object) -> str:
    """``tokens: 1,234 in, 56 out; $0.0123`` (or ``cost unknown (test)``) for a summary."""
    listed = cost.get("models") if isinstance(cost, dict) else None
    entries = [e for e in (listed if isinstance(listed, list) else []) if isinstance(e, dict)]
    tokens_in = sum(_number(e.get("input_tokens")) for e in entries)
    tokens_out = sum(_number(e.get("output_tokens")) for e in entries)
    return f"tokens: {tokens_in:,} in, {tokens_out:,} out; {cost_text(cost)}"
