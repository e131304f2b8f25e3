"""The texts of ``/context``, ``/cost`` and ``/model``: the same words on every surface.

Each report reads the session as it stands and returns plain text; the
commands module runs them, the surfaces show their text as they show any
command's.
"""

from __future__ import annotations

import math

from cairn.agent.mcp.tool_search import TOOL_SEARCH
from cairn.agent.runtime import Session
from cairn.agent.tools.permissions import MCP_PREFIX
from cairn.context.breakdown import ContextBreakdown, breakdown, conversation_parts
from cairn.context.budget import handoff_line
from cairn.context.tracker import schema_tokens
from cairn.messages import JSONObject, system
from cairn.provider.metering import Bill
from cairn.provider.registry import ModelInfo, lookup, price
from cairn.tokens import estimate_message_tokens, estimate_text_tokens
from cairn.wire_apis import API_NAMES

#: How each projection source reads in ``/context``.
_SOURCE = {
    "anchored": "the provider's last count plus estimates of what came after it",
    "estimate": "estimated: no usable count from the provider yet",
    "unknown": "unknown",
}


def context_report(session: Session) -> str:
    """``/context``: the next request's tokens by source, the lines and the calibration."""
    fixed = session.fixed_context()
    pipeline = session.pipeline
    snapshot = pipeline.project(fixed)
    fixed_tokens = pipeline.fixed_tokens(fixed)
    parts = breakdown(
        _fixed_parts(session),
        fixed_tokens,
        conversation_parts(
            pipeline.messages, pipeline.checkpoint_messages, estimate_message_tokens
        ),
        snapshot.tokens,
        snapshot.input_budget,
    )
    budget = snapshot.input_budget
    head = f"context      {parts.total:,}"
    head += f" of {budget:,} tokens ({_percent(parts, parts.total)})" if budget else " tokens"
    lines = [head, f"counted      {_SOURCE[snapshot.source]}"]
    width = max(len(row.label) for row in parts.rows)
    for row in parts.rows:
        lines.append(f"  {row.label:<{width}}  {row.tokens:>9,}  {_percent(parts, row.tokens)}")
    if budget:
        free = budget - parts.total
        lines.append(f"  {'free':<{width}}  {free:>9,}  {_percent(parts, free)}")
        config = pipeline.config
        lines.append(
            f"lines        handoff above {handoff_line(budget, config.handoff_ratio):,}, "
            f"compaction at {math.ceil(config.compact_ratio * budget):,}"
        )
    else:
        lines.append("lines        none: automatic compaction is off until a window is set")
    lines.append(_calibration_line(session, fixed.tokens, fixed_tokens))
    return "\n".join(lines)


def _fixed_parts(session: Session) -> list[tuple[str, int]]:
    """The fixed context's sources and their estimates, in the order a request has them."""
    parts = [("system prompt", estimate_message_tokens(system(session.base_prompt())))]
    if session.instructions is not None:
        for file in session.instructions.load(session.state.cwd()).files:
            parts.append((f"instructions {file.shown}", estimate_text_tokens(file.text)))
    schemas = session.tools.schemas()
    mcp = [s for s in schemas if _is_mcp(s)]
    own = [s for s in schemas if not _is_mcp(s)]
    parts.append((f"tools (Cairn, {len(own)})", schema_tokens(own)))
    if mcp:
        parts.append((f"tools (MCP, {len(mcp)})", schema_tokens(mcp)))
    return parts


def _is_mcp(schema: JSONObject) -> bool:
    function = schema.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    return isinstance(name, str) and (name.startswith(MCP_PREFIX) or name == TOOL_SEARCH)


def _percent(parts: ContextBreakdown, tokens: int) -> str:
    share = parts.share(tokens)
    return "" if share is None else f"{100 * share:5.1f} %"


def _calibration_line(session: Session, estimate: int, counted: int) -> str:
    density = session.pipeline.density
    if session.pipeline.calibration is None or counted == estimate:
        fixed = f"the fixed context is estimated ({estimate:,} tokens) until a response measures it"
    else:
        fixed = f"the fixed context measured at {counted:,} tokens (estimated {estimate:,})"
    return f"calibration  {fixed}; messages counted at {density:.2f}× the estimate"


def cost_report(session: Session) -> str:
    """``/cost``: the tokens billed this session and what they cost at the registry's prices."""
    bill = session.meter.bill
    info = lookup(session.model.model, session.runtime.settings.models)
    tokens = bill.tokens
    prompt = tokens.input + tokens.cached_input
    share = f" ({tokens.cached_input / prompt:.0%})" if prompt else ""
    written = f"; {tokens.cache_write:,} written to the cache" if tokens.cache_write else ""
    lines = [
        _cost_line(session.model.model, bill, info),
        f"api          {API_NAMES[session.model.api]}",
        f"input        {prompt:,} tokens, {tokens.cached_input:,} of them from the cache"
        f"{share}{written}",
        f"output       {tokens.output:,} tokens",
        f"responses    {bill.responses:,}"
        + (f" ({bill.unmetered:,} more reported no usage)" if bill.unmetered else ""),
    ]
    return "\n".join(lines)


def _cost_line(model: str, bill: Bill, info: ModelInfo | None) -> str:
    amount = price(bill.tokens, info) if info is not None else None
    if amount is None:
        return (
            f"cost         unknown: no prices for {model!r} (set models.<name>.input_price, "
            "cached_input_price and output_price in settings.json)"
        )
    read = f", read {info.read.isoformat()}" if info is not None and info.read else ""
    return f"cost         ${amount:,.4f} at the prices of {model}{read}"


def model_report(session: Session, previous_window: int | None = None) -> str:
    """``/model``: the model the next request goes to, its window and where it comes from."""
    model = session.model
    info = lookup(model.model, session.runtime.settings.models)
    window = f"{model.context_window:,}" if model.context_window else "unknown"
    lines = [f"model        {model.model}", f"window       {window}"]
    if previous_window is not None and previous_window != model.context_window:
        lines[-1] += f" (was {previous_window:,})"
    if info is None:
        lines.append("registry     not listed: the window is the one configured")
    else:
        read = f", read {info.read.isoformat()}" if info.read else ""
        lines.append(f"registry     {info.name}{read}")
    return "\n".join(lines)
