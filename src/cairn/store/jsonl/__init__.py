"""The embedded transcript store: one append-only JSONL file per session.

Durability rules (DESIGN §6): every record is one ``write`` of one line, so it
reaches the OS before ``append`` returns and survives the process being
killed; compaction checkpoints and turn ends are ``fsync``ed; a new file's
directory is ``fsync``ed; one writer per file, enforced by ``flock``.

Reading never modifies a file. Opening for writing repairs a torn last line
(a crash mid-write) by moving it into a sibling ``*.torn-<time>`` file and
truncating it away, so the next record starts on a clean line.

A new session file appears whole or not at all: ``create`` writes and fsyncs
the header in a hidden sibling (``.<name>.<pid>-<random>.new``), then links it
into place. ``open`` refuses — with ``TranscriptHeaderError``, leaving the
file as it is — a file with no usable header: an empty one, one whose only
line is a torn header (a crash while an older Cairn created it), or one whose
first line is not a session header. Such a file is not rewritten: the
workspace a header names cannot be recovered from the file name, and
guessing it would attach the session to the wrong project.

The modules: ``lines`` (a file's bytes as lines), ``reader`` (reading without
changing), ``follower`` (records as another process writes them), ``files``
(creating, locking, repairing, deleting), ``writer`` (the one writer) and
``factory`` (a workspace's sessions).
"""

from cairn.store.jsonl.factory import JsonlStoreFactory
from cairn.store.jsonl.files import write_transcript
from cairn.store.jsonl.follower import follow_transcript
from cairn.store.jsonl.reader import (
    describe_transcript,
    iter_records,
    parse_transcript,
    read_transcript,
)
from cairn.store.jsonl.writer import JsonlTranscriptStore

__all__ = [
    "JsonlStoreFactory",
    "JsonlTranscriptStore",
    "describe_transcript",
    "follow_transcript",
    "iter_records",
    "parse_transcript",
    "read_transcript",
    "write_transcript",
]
