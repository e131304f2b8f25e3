"""The ``cairn`` command: parse the arguments and hand off to a surface.

Every subcommand is one ``_add_<name>`` function below that declares its
arguments and sets ``handler``; adding a command means writing one such
function and listing it in ``COMMANDS``. With no subcommand, ``-p`` runs one
task headless and anything else opens the terminal app (``--resume ID``,
``--continue``). Handlers import their surface
lazily, so ``cairn --version`` and ``--help`` stay fast.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeAlias

from cairn import __version__
from cairn.wire_apis import WIRE_APIS

PROG = "cairn"

Handler: TypeAlias = Callable[[argparse.Namespace], int]
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def _add_inspect(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "inspect",
        help="summarize a session transcript (never modifies it)",
        description=(
            "Load a session transcript (.jsonl) read-only and show what it holds: "
            "record counts, the UI and API views, compactions, checkpoints and "
            "loading warnings."
        ),
    )
    parser.add_argument(
        "path", metavar="PATH|ID", help="a session .jsonl file, or a session id of the store"
    )
    _add_store_flag(parser)
    parser.add_argument(
        "--json",
        dest="as_json",
        action="store_true",
        help="print one JSON object (with --view: that view's messages as a JSON array)",
    )
    parser.add_argument(
        "--view",
        choices=("ui", "api"),
        help="print one view's messages instead of the summary",
    )
    parser.set_defaults(handler=_run_inspect)


def _run_inspect(args: argparse.Namespace) -> int:
    from cairn.surfaces.inspect import run_inspect
    from cairn.surfaces.sessions import with_stored_file

    return with_stored_file(
        "inspect",
        args.path,
        args.store,
        lambda path, origin: run_inspect(path, as_json=args.as_json, view=args.view, origin=origin),
    )


def _add_store_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        metavar="URL",
        help="a PostgreSQL URL (default: CAIRN_STORE_URL, then store.url in settings, "
        "else the JSONL files under CAIRN_HOME)",
    )


def _add_replay(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="replay a recorded agent session through the context pipeline",
        description=(
            "Import a recorded session (Claude Code, Codex, SWE-agent, OpenHands, tau-bench, "
            "OpenAI chat JSON or Cairn's own) and replay it request by request under a "
            "context window: every handoff, snip and compaction, exact token counts, "
            "overflows, billed and cache-eligible tokens. Exit code 1 when a session fails "
            "(the window cannot hold its fixed context, or a request could not be brought "
            "under the input budget), 2 on a usage or import error."
        ),
    )
    parser.add_argument(
        "path", metavar="FILE|ID", help="the recorded session, or a session id of the store"
    )
    _add_store_flag(parser)
    parser.add_argument(
        "--format",
        default="auto",
        help="openai, tau-bench, swe-agent, openhands, claude-code, codex, cairn (default: auto)",
    )
    parser.add_argument(
        "--session", type=int, default=None, help="replay only the N-th session (0-based)"
    )
    parser.add_argument(
        "--window", type=int, required=True, help="the model's context window in tokens"
    )
    parser.add_argument(
        "--tokenizer", default="cl100k", help="exact tokenizer for true sizes (default: cl100k)"
    )
    parser.add_argument(
        "--fixed-tokens",
        default="auto",
        metavar="N|auto",
        help=(
            "true size of the system prompt and tool schemas every request carries; auto "
            "(default): inferred from the recorded usage, else the format's default (Claude "
            "Code and Codex do not record them), else what the recording holds"
        ),
    )
    parser.add_argument("--summarizer", default="fallback", help="fallback (default) or llm")
    parser.add_argument(
        "--policy",
        choices=("cairn", "none", "post-response"),
        default="cairn",
        help="cairn (check before every request), none, or post-response (the old check)",
    )
    parser.add_argument(
        "--compare", action="store_true", help="run all three policies and compare them"
    )
    parser.add_argument("--json", dest="as_json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--report",
        type=Path,
        metavar="DIR",
        help="write report.json, requests.csv, context.png and the replayed transcript(s)",
    )
    parser.set_defaults(handler=_run_replay)


def _run_replay(args: argparse.Namespace) -> int:
    from cairn.surfaces.sessions import with_stored_file

    return with_stored_file("replay", args.path, args.store, lambda path, _: _replay(path, args))


def _replay(path: Path, args: argparse.Namespace) -> int:
    from cairn.surfaces.replay import ReplayArgs, run_replay

    return run_replay(
        ReplayArgs(
            path=path,
            format=args.format,
            session=args.session,
            window=args.window,
            tokenizer=args.tokenizer,
            summarizer=args.summarizer,
            policy=args.policy,
            compare=args.compare,
            as_json=args.as_json,
            report=args.report,
            fixed_tokens=args.fixed_tokens,
        )
    )


def _run_print(args: argparse.Namespace) -> int:
    from cairn.surfaces.print_mode import PrintArgs, run_print

    return run_print(
        PrintArgs(
            prompt=args.prompt,
            output_format=args.output_format,
            resume=args.resume,
            max_turns=args.max_turns,
            **_surface_flags(args),
        )
    )


def _run_terminal(args: argparse.Namespace) -> int:
    from cairn.surfaces.terminal.run import TerminalArgs, run_terminal

    return run_terminal(
        TerminalArgs(
            resume=args.resume,
            latest=args.latest,
            **_surface_flags(args),
        )
    )


#: The flags every surface takes (``cairn.surfaces.setup.SurfaceArgs``), workspace aside.
SURFACE_FLAGS = (
    "model",
    "context_window",
    "max_output_tokens",
    "api",
    "permission_mode",
    "instructions",
)


def _surface_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The flags every surface takes, as its arguments' keywords; the workspace is here."""
    return {name: getattr(args, name) for name in SURFACE_FLAGS} | {"workspace": Path.cwd()}


def _add_model_flags(parser: argparse.ArgumentParser, permission_help: str) -> None:
    """The model, permission and instructions flags, also after a subcommand (``acp --model M``).

    SUPPRESS: given after the subcommand they win, else the ones given before it stand.
    """
    parser.add_argument("--model", default=argparse.SUPPRESS, help="the model name")
    parser.add_argument(
        "--context-window", type=int, metavar="N", default=argparse.SUPPRESS, help="the window"
    )
    parser.add_argument(
        "--max-output-tokens", type=int, metavar="N", default=argparse.SUPPRESS, help="the cap"
    )
    parser.add_argument("--api", choices=WIRE_APIS, default=argparse.SUPPRESS, help="the wire API")
    parser.add_argument(
        "--permission-mode",
        choices=("ask", "accept-edits", "bypass"),
        default=argparse.SUPPRESS,
        help=f"{permission_help}: accept-edits by default",
    )
    _add_instructions_flag(parser, default=argparse.SUPPRESS)


def _add_instructions_flag(parser: argparse.ArgumentParser, *, default: object) -> None:
    parser.add_argument(
        "--no-instructions",
        dest="instructions",
        action="store_false",
        default=default,
        help="do not read AGENTS.md / CLAUDE.md (the user's and the workspace's) into the prompt",
    )


def _add_sessions(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "sessions",
        help="list the store's sessions; move one between a JSONL file and the store",
        description=(
            "The store is a PostgreSQL database (--store URL, CAIRN_STORE_URL or store.url "
            "in settings.json; needs cairn[postgres]) or, without one, the JSONL files under "
            "CAIRN_HOME. export writes a session to a new .jsonl file; import copies a .jsonl "
            "transcript into the store. Both keep every record, its id and its time."
        ),
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="this workspace's sessions, newest first")
    _add_store_flag(listing)
    listing.set_defaults(handler=_run_sessions_list)
    export = actions.add_parser("export", help="write a stored session to a new .jsonl file")
    export.add_argument("session_id", metavar="ID", help="the session id")
    export.add_argument("out", metavar="FILE", type=Path, help="the .jsonl file to create")
    _add_store_flag(export)
    export.set_defaults(handler=_run_sessions_export)
    load = actions.add_parser("import", help="copy a .jsonl transcript into the store")
    load.add_argument("path", metavar="FILE", type=Path, help="a Cairn transcript (.jsonl)")
    _add_store_flag(load)
    load.set_defaults(handler=_run_sessions_import)


def _run_sessions_list(args: argparse.Namespace) -> int:
    from cairn.surfaces.sessions import run_list

    return run_list(args.store, Path.cwd())


def _run_sessions_export(args: argparse.Namespace) -> int:
    from cairn.surfaces.sessions import run_export

    return run_export(args.session_id, args.out, args.store, Path.cwd())


def _run_sessions_import(args: argparse.Namespace) -> int:
    from cairn.surfaces.sessions import run_import

    return run_import(args.path, args.store, Path.cwd())


def _add_acp(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "acp",
        help="serve the Agent Client Protocol on stdio (Zed, JetBrains, any ACP client)",
        description=(
            "Run Cairn as an editor's agent: JSON-RPC on stdin and stdout, logs on stderr. "
            "The editor spawns it; each session's cwd is its workspace. The model comes "
            "from the settings, CAIRN_MODEL / OPENAI_BASE_URL / OPENAI_API_KEY and the flags."
        ),
    )
    _add_model_flags(parser, "the mode sessions start in (the editor can switch it)")
    parser.set_defaults(handler=_run_acp)


def _run_acp(args: argparse.Namespace) -> int:
    from cairn.surfaces.acp import AcpArgs, run_acp

    return run_acp(AcpArgs(**_surface_flags(args)))


def _add_web(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "web",
        help="the browser UI on 127.0.0.1: sessions side by side, the compaction hint",
        description=(
            "Serve the browser UI for this directory's sessions on 127.0.0.1 and print its "
            "address, which carries a random token in its fragment (no session is shown "
            "without it; it never travels in a cookie). Ctrl+C stops it."
        ),
    )
    parser.add_argument("--port", type=int, default=0, help="the port (default: any free one)")
    parser.add_argument(
        "--open",
        dest="open_browser",
        action="store_true",
        help="open a browser (on a private local file: no token on its command line)",
    )
    _add_model_flags(parser, "which calls ask first (the page answers)")
    parser.set_defaults(handler=_run_web)


def _run_web(args: argparse.Namespace) -> int:
    from cairn.surfaces.web.run import WebArgs, run_web

    return run_web(
        WebArgs(
            port=args.port,
            open_browser=args.open_browser,
            **_surface_flags(args),
        )
    )


#: Every subcommand, in the order ``cairn --help`` lists them.
COMMANDS: tuple[Callable[[Subparsers], None], ...] = (
    _add_inspect,
    _add_replay,
    _add_sessions,
    _add_acp,
    _add_web,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Cairn: keep a long-running LLM agent session inside its context window.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    headless = parser.add_argument_group("one task, no interface (cairn -p)")
    headless.add_argument(
        "-p",
        "--print",
        dest="prompt",
        nargs="?",
        const="-",
        metavar="PROMPT",
        help="run one task to the end and print the answer (no PROMPT: read it from stdin)",
    )
    headless.add_argument(
        "--output-format", choices=("text", "json", "stream-json"), default="text"
    )
    headless.add_argument(
        "--resume",
        metavar="ID",
        nargs="?",
        const="",
        help="continue session ID of this workspace (the terminal app: no ID picks one)",
    )
    headless.add_argument("--model", help="the model name (overrides CAIRN_MODEL and settings)")
    headless.add_argument(
        "--context-window",
        type=int,
        metavar="N",
        help="the model's window in tokens (overrides CAIRN_CONTEXT_WINDOW and settings)",
    )
    headless.add_argument(
        "--max-output-tokens",
        type=int,
        metavar="N",
        help="the response cap, also the output reserve (overrides CAIRN_MAX_OUTPUT_TOKENS)",
    )
    headless.add_argument(
        "--api",
        choices=WIRE_APIS,
        help=(
            "the wire API: chat (completions, the default), responses (OpenAI Responses), "
            "anthropic (Messages); overrides CAIRN_API and settings"
        ),
    )
    headless.add_argument(
        "--permission-mode",
        choices=("ask", "accept-edits", "bypass"),
        default="accept-edits",
        help=(
            "accept-edits (default): edits go ahead, commands are refused; "
            "bypass: everything runs; ask: every write is refused (nobody can answer here)"
        ),
    )
    headless.add_argument("--max-turns", type=int, default=50, help="requests at most")
    _add_instructions_flag(parser, default=True)
    terminal = parser.add_argument_group(
        "the terminal app (cairn with no PROMPT; --resume, --model and the window flags apply)"
    )
    terminal.add_argument(
        "-c",
        "--continue",
        dest="latest",
        action="store_true",
        help="open this workspace's most recent session",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in COMMANDS:
        add(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``cairn`` with ``argv`` (default: the process arguments); return the exit code."""
    _tolerate_unencodable_output()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error (already printed)
        return exc.code if isinstance(exc.code, int) else 2
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None and args.prompt is not None:
        if args.latest or args.resume == "":
            # Nobody can pick a session here: -p needs the id itself.
            flag = "--continue" if args.latest else "--resume with no ID"
            print(f"cairn -p: {flag} is for the terminal app; use --resume ID", file=sys.stderr)
            return 2
        handler = _run_print
    if handler is None:
        if not _on_a_terminal():
            # The app draws on a terminal; without one, say what works instead.
            parser.print_help(sys.stderr)
            print(
                "\ncairn: the terminal app needs a terminal; use cairn -p for one task without one",
                file=sys.stderr,
            )
            return 2
        handler = _run_terminal
    try:
        return handler(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (``cairn inspect … | head``): stop quietly.
        _silence_stdout()
        return 1


def _on_a_terminal() -> bool:
    return all(stream is not None and stream.isatty() for stream in (sys.stdin, sys.stdout))


def _tolerate_unencodable_output() -> None:
    """Print transcripts on any terminal: characters the encoding lacks become ``?``."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(Exception):
                reconfigure(errors="replace")


def _silence_stdout() -> None:
    # Python flushes stdout at exit; point it at /dev/null so that flush
    # cannot raise a second BrokenPipeError.
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
