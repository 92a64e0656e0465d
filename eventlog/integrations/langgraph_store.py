"""LangGraph checkpoint streams on the log: frames in, views kept, blobs read back.

Framework-free: the LangGraph adapter (eventlog.integrations.langgraph) turns calls into the
frames built here. Streams: one per ``(thread_id, checkpoint_ns)``, keyed
``lg:<len(thread_id)>:<thread_id>:<ns>``. Tables (``sid`` = the stream's u64 id, big-endian;
``s16(x)`` = u16 length + UTF-8 of ``x``):

- ``lg_threads``: ``s16(thread_id) + ns`` -> sid, for every stream whose view is not empty;
- ``lg_checkpoints``: sid + checkpoint id -> :class:`projections.langgraph.CkptRow`, for
  checkpoints stored before the read row replaced it (logs written before; a checkpoint
  stored again loses it): a put writes none;
- ``lg_blobs``: sid + ``s16(channel)`` + version key -> u64 seq of the frame holding the blob;
- ``lg_writes``: sid + ``s16(checkpoint id)`` + ``s16(task id)`` + u32 (idx + 2**31) ->
  :class:`projections.langgraph.WriteRow`;
- ``lg_runs``: ``s16(run_id)`` + sid + checkpoint id -> b"";
- ``lg_reads``: sid + checkpoint id -> :class:`ReadRow` (what ``get_tuple`` / ``list`` read:
  the checkpoint row, body, versions, and per channel the seq of its blob's frame and the blob
  itself when small), written by :func:`apply_rows`: a checkpoint's one row. Absent for
  checkpoints stored before it existed (they have their ``lg_checkpoints`` row; readers fall
  back to the frame); :func:`stream_rows` walks both tables merged by key;
- ``lg_latest``: ``b"c" + s16(thread_id) + ns`` -> :class:`LatestRow` (the newest checkpoint
  with its channel values resolved: what ``get_tuple`` latest returns but the writes) and
  ``b"w" + s16(thread_id) + ns`` -> :class:`LatestWrites` (the writes stored against it),
  ``b"k" + s16(thread_id) + ns`` -> the link row naming the data rows of the ``c`` row's
  links over ``INLINE_MAX`` bytes (its ``apart``), and per stream ``b"d" + sid + seq +
  digest(channel)`` -> those data rows, written once (:mod:`.langgraph_links`: no put
  rewrites a large row, and a read fetches them with the ``c`` row in one statement); and
  per stream ``b"f" + sid + seq + channel`` -> ``s16(serde type) + bytes``: the raw
  (uncompressed) bytes of a keyframe over ``INLINE_MAX`` bytes that replaces a patch (the
  channel is patched), written with the frame's rows (:func:`apply_rows`, so ``rebuild``
  writes them again) and deleted with the thread, so a read of a patch against it
  decompresses no frame. All are optional: a reader falls back to the other tables when they
  are absent (logs written before them, after a removal or a copy, after ``rebuild``); the
  next put writes them again.

Writing: :func:`plan_blob` picks, in the caller, the cheapest blob for a channel's new version
(full, append of a list's new elements, or zstd patch) from what this process remembers of the
channel's last blob (:class:`Memos`); the frames (:class:`PutFrame`, :class:`WritesFrame`,
:class:`RemoveFrame`, :class:`CopiedFrame`) are built by the log's writer inside the write
transaction, in call order, and update the views in that same transaction.

Invariants:
- :func:`apply_rows` runs in the write transaction that appends the frame (from the frame's
  ``appended`` hook), so the rows always equal :func:`projections.langgraph.fold` of the
  committed frames; :func:`verify_views` checks that for every stream.
- A delta blob's base is checked against the blob index inside the write transaction; when it
  is gone, the value is serialized whole there instead. Duplicate writes (``idx >= 0``) are
  dropped there too, so concurrent duplicates cannot both land.
- Blob values are never copied into the views: a blob is read from the frame that holds it.
  ``BLOB_APPEND`` / ``BLOB_PATCH`` blobs name their base by stream seq, always a smaller one,
  so resolving a chain terminates; chains are at most ``CHAIN_READ_MAX`` long on read. Writers
  take every delta against the channel's keyframe (a full blob) and store a new keyframe after
  ``KEYFRAME_EVERY`` deltas: chains they write are one link long (logs written before keyframes
  chained each delta onto the previous version, up to 256 links; they read unchanged).
- ``lg_latest``, when its ``c`` row is present, is the materialization of the checkpoint with
  the greatest id (written by the put that stores it, in the same transaction, from the
  blobs it holds and the previous row); its ``w`` row, when present and naming the same
  checkpoint, holds exactly that checkpoint's writes. Anything that could make them wrong
  (a removal, a copy, a put of an older id re-storing a version they read) deletes them;
  :func:`verify_views` checks them against the other tables.
- Everything a read needs from a transaction is read there (frames, blob chains); no
  transaction outlives a call. Values are decoded after it (:func:`materialize`), and bytes kept
  across reads (:class:`Patches`) are keyed by stream seq, which never changes meaning.
"""

from __future__ import annotations

from eventlog.integrations.langgraph_blobs import (
    RESOLVED_BYTES_MAX,
    BlobReader,
    Chain,
    Loads,
    Memo,
    Memos,
    Patches,
    Pending,
    full_blob,
    kept_chain,
    make_patch,
    materialize,
    memo_weight,
    msgpack_array,
    msgpack_array_header,
    plan_blob,
)
from eventlog.integrations.langgraph_frames import (
    CopiedFrame,
    PutFrame,
    RemoveFrame,
    ViewFrame,
    WritesFrame,
    keep_latest,
    keep_latest_writes,
)
from eventlog.integrations.langgraph_links import (
    LINK_PREFIX,
    LatestBlobs,
    link_key,
    link_prefix,
)
from eventlog.integrations.langgraph_rows import (
    BLOBS,
    CHAIN_RATIO,
    CHAIN_READ_MAX,
    CHECKPOINTS,
    IDX_BIAS,
    INLINE_MAX,
    KEYFRAME_EVERY,
    LATEST,
    MEMO_BYTES_MAX,
    MEMO_ENTRIES_MAX,
    PATCH_KEYFRAME_EVERY,
    PATCH_MIN_BYTES,
    READS,
    RUNS,
    STREAM_PREFIX,
    TABLES,
    THREADS,
    VIEW_TABLES,
    WRITES,
    LatestRow,
    LatestWrites,
    ReadRow,
    Serde,
    apply_rows,
    blob_key,
    blob_seq,
    checkpoint_key,
    checkpoint_rows,
    decode_read_row,
    drop_latest,
    latest_blobs,
    latest_blobs_key,
    latest_checkpoint,
    latest_key,
    latest_writes_key,
    make_read_row,
    parse_stream_key,
    read_checkpoint_row,
    read_frame,
    read_latest,
    read_latest_parts,
    read_named,
    read_row,
    read_view,
    row_of_read,
    run_key,
    run_prefix,
    split_run_key,
    split_thread_key,
    split_write_key,
    stream_id,
    stream_ids,
    stream_key,
    stream_name,
    stream_rows,
    thread_key,
    thread_prefix,
    write_key,
    write_rows,
    writes_prefix,
)
from eventlog.integrations.langgraph_view import (
    ROWS,
    VIEW,
    LangGraphView,
    expected_latest,
    verify_views,
)

__all__ = [
    "BLOBS",
    "CHAIN_RATIO",
    "CHAIN_READ_MAX",
    "CHECKPOINTS",
    "IDX_BIAS",
    "INLINE_MAX",
    "KEYFRAME_EVERY",
    "LATEST",
    "LINK_PREFIX",
    "MEMO_BYTES_MAX",
    "MEMO_ENTRIES_MAX",
    "PATCH_KEYFRAME_EVERY",
    "PATCH_MIN_BYTES",
    "READS",
    "RESOLVED_BYTES_MAX",
    "ROWS",
    "RUNS",
    "STREAM_PREFIX",
    "TABLES",
    "THREADS",
    "VIEW",
    "VIEW_TABLES",
    "WRITES",
    "BlobReader",
    "Chain",
    "CopiedFrame",
    "LangGraphView",
    "LatestBlobs",
    "LatestRow",
    "LatestWrites",
    "Loads",
    "Memo",
    "Memos",
    "Patches",
    "Pending",
    "PutFrame",
    "ReadRow",
    "RemoveFrame",
    "Serde",
    "ViewFrame",
    "WritesFrame",
    "apply_rows",
    "blob_key",
    "blob_seq",
    "checkpoint_key",
    "checkpoint_rows",
    "decode_read_row",
    "drop_latest",
    "expected_latest",
    "full_blob",
    "keep_latest",
    "keep_latest_writes",
    "kept_chain",
    "latest_blobs",
    "latest_blobs_key",
    "latest_checkpoint",
    "latest_key",
    "latest_writes_key",
    "link_key",
    "link_prefix",
    "make_patch",
    "make_read_row",
    "materialize",
    "memo_weight",
    "msgpack_array",
    "msgpack_array_header",
    "parse_stream_key",
    "plan_blob",
    "read_checkpoint_row",
    "read_frame",
    "read_latest",
    "read_latest_parts",
    "read_named",
    "read_row",
    "read_view",
    "row_of_read",
    "run_key",
    "run_prefix",
    "split_run_key",
    "split_thread_key",
    "split_write_key",
    "stream_id",
    "stream_ids",
    "stream_key",
    "stream_name",
    "stream_rows",
    "thread_key",
    "thread_prefix",
    "verify_views",
    "write_key",
    "write_rows",
    "writes_prefix",
]
