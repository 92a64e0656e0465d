"""``docs/reliability.md``: the campaign's figures, as one table, with its seed and duration."""

from __future__ import annotations

import platform
import sys
import time

from soak.common import Tally


def render(seed: int, scale: str, seconds: float, tallies: dict[str, Tally]) -> str:
    def c(section: str, name: str) -> int:
        t = tallies.get(section)
        return 0 if t is None else t.counts[name]

    def by(section: str, prefix: str) -> str:
        t = tallies.get(section)
        if t is None:
            return "not run"
        items = sorted((k[len(prefix) :], v) for k, v in t.counts.items() if k.startswith(prefix))
        return ", ".join(f"{k} {v:,}" for k, v in items) or "none"

    acked = sum(c(s, "acked") for s in ("kills", "faults", "cancel"))
    lost = sum(c(s, "lost") for s in tallies)
    failures = sum(t.counts["failures"] for t in tallies.values())
    flips = c("damage", "flip:cases")
    cuts = c("damage", "cut:cases")
    damaged_crashes = (
        c("damage", "flip:crash") + c("damage", "cut:crash") + c("damage", "txnid:crash")
    )
    damaged_hangs = c("damage", "flip:hang") + c("damage", "cut:hang") + c("damage", "txnid:hang")
    rows = [
        ("Kills (SIGKILL of real writer processes)",
         f"kills {c('kills', 'kills'):,} ({by('kills', 'kills:')}) in {c('kills', 'resumed'):,} "
         f"rounds, acknowledged saves checked "
         f"{acked:,}, lost {lost}, duplicated {sum(c(s, 'duplicated') for s in tallies)}, "
         f"buffered runs checked whole {c('kills', 'runs_checked'):,}, half-applied "
         f"{c('kills', 'half_applied')}, resumed {c('kills', 'resumed'):,}"),
        ("Faults at the backend seam and on a real disk",
         f"faults injected {c('faults', 'faults'):,} by kind ({by('faults', 'faults:')}), "
         f"recovered {c('faults', 'recovered'):,}; typed errors to callers "
         f"{c('faults', 'typed_errors'):,}; map doublings under a reader "
         f"{c('faults', 'map_growths')}"),
        ("Asyncio cancellation",
         f"saves cancelled {c('cancel', 'cancelled'):,}, returned saves checked "
         f"{c('cancel', 'acked'):,}, lost {c('cancel', 'lost')}"),
        ("Readers under load",
         f"reads {c('readers', 'reader_reads'):,} (load/history/record_at and the CLI), torn "
         f"{c('readers', 'torn_reads')}, writer saves meanwhile {c('readers', 'writer_saves'):,}"),
        ("Damage to copies of data.mdb",
         f"bit flips {flips:,}, reported {c('damage', 'flip:reported'):,}, in free space "
         f"{c('damage', 'flip:harmless'):,}, undetected {c('damage', 'flip:undetected')}; "
         f"truncations {cuts:,}, reported {c('damage', 'cut:reported'):,}; crashes "
         f"{damaged_crashes}, hangs {damaged_hangs}, untyped "
         f"{sum(c('damage', k + ':untyped') for k in ('flip', 'cut', 'txnid'))}"),
        ("Meta-page txnid flips (every bit of both)",
         f"flips {c('damage', 'txnid:cases')}, reported {c('damage', 'txnid:reported')}, "
         f"undetected rollbacks {c('damage', 'txnid:undetected')}, harmless "
         f"{c('damage', 'txnid:harmless')}"),
        ("Power cuts (FUSE simulator, issue 28)",
         f"cuts {c('powercut', 'cuts'):,} ({by('powercut', 'cuts:')}), acknowledged saves "
         f"checked {c('powercut', 'acked'):,}, lost {c('powercut', 'lost')}, unsynced writes "
         f"dropped {c('powercut', 'unsynced_writes_dropped'):,} (kept "
         f"{c('powercut', 'unsynced_writes_kept'):,}, torn {c('powercut', 'torn_writes'):,}), "
         f"names undone {c('powercut', 'names_undone'):,}, buffered runs checked whole "
         f"{c('powercut', 'runs_checked'):,}, half-applied {c('powercut', 'half_applied')}, "
         f"compacts returned before a cut {c('powercut', 'compact:returned_before_cut')} (DEST "
         f"whole after it {c('powercut', 'compact:dest_whole_after_cut')}), failures "
         f"{c('powercut', 'failures')}"),
        ("Bad input (hypothesis)",
         f"bad inputs {c('badinput', 'bad_inputs'):,}, typed errors {c('badinput', 'typed'):,}, "
         f"accepted {c('badinput', 'accepted'):,}, untyped errors {c('badinput', 'untyped')}"),
    ]  # fmt: skip
    lines = [
        "# Reliability",
        "",
        "Produced by `make soak` (`python -m soak`): every figure below comes from one run of "
        "the campaign (see `soak/`), seeded, on the machine it names. Regenerate with "
        f"`python -m soak --seed {seed}{' --long' if scale == 'long' else ''} --out "
        "docs/reliability.md`.",
        "",
        f"- seed: {seed}; scale: {scale}; duration: {seconds / 60:.1f} min; "
        f"date: {time.strftime('%Y-%m-%d', time.gmtime())}",
        f"- machine: {platform.machine()}, Python {sys.version.split()[0]}, "
        f"{platform.system()} {platform.release()}",
        f"- failures: {failures}",
        "",
        "| campaign | result |",
        "|---|---|",
        *(f"| {a} | {b} |" for a, b in rows),
        "",
        "What each row checks:",
        "",
        "- **Kills**: writers are killed with SIGKILL at seeded moments: a single writer (durable "
        "saves and buffered runs of `save_instance`), four writer processes on one log (own "
        "invocations plus one shared fan-out), the async `Checkpointer` with 1,000 concurrent "
        "saves, compaction into a new log, and the LangGraph, techrevati and apflow "
        "integrations. After each kill the log is opened writable, `verify` passes, every "
        "acknowledged save is present exactly once, every buffered run is committed whole or "
        "not at all, and the next round resumes the job from the log.",
        "- **Faults**: `FaultyBackend` fails a commit once, every Nth commit, with "
        "`OSError(ENOSPC)` and `OSError(EIO)`, and fails reads, while four threads save; a real "
        "6 MiB tmpfs fills up (then space is freed), and the map grows from 1 MiB while "
        "another process holds a read transaction. Every caller whose operation failed got a "
        "`CheckpointError`; the others were unaffected; after the fault cleared the log saved "
        "and verified, with nothing acknowledged lost (`recovered`).",
        "- **Damage**: single-bit flips at seeded offsets and truncations at seeded sizes of a "
        "copy of a log's `data.mdb`, each opened read-only, verified and read in full in a "
        "worker process (then opened writable for one more save when nothing was reported). "
        "*In free space*: everything read back exactly as from the pristine copy. "
        "*Undetected*: what read back differed and nothing reported it.",
        "- **Meta-page txnid flips**: LMDB 0.9's meta pages carry no checksum; ckptlog checks "
        "that the two pages hold consecutive transaction ids, each in the page of its parity. "
        "A flip of bit 1 can leave a consistent pair (newest t becomes t-2, or the older t-1 "
        "becomes t+1) and roll back one transaction unseen: at most 2 of the 128 flips, "
        "depending on t; see the README's Guarantees.",
        "- **Power cuts**: the same writers as the kills, on the project's power-loss "
        "simulator (`soak/powerfs.py`, a FUSE file system that keeps every write in memory "
        "until its file is fsynced and every name until its directory is fsynced), are "
        "SIGKILLed at a seeded moment and the power is cut: everything unsynced is dropped "
        "(*whole*), or a random subset of each file's unsynced writes is kept with one torn at "
        "a 512-byte sector (*torn*). Half the cuts run with POSIX name semantics (a name is "
        "durable after an fsync of its directory), half with ext4/XFS-like ordered metadata "
        "(any fsync commits every name). Then the checks of the kills, and a `compact` that "
        "returned before the cut must have its DEST, whole.",
        "- **Bad input**: wrong types, sizes and encodings from hypothesis to `save`, "
        "`save_instance`, the fan-out saves, every read method, the async `Checkpointer`, the "
        "techrevati, apflow and LangGraph savers and the `ckptlog` command line. Anything "
        "raised must be a `CheckpointError` (the CLI: a documented exit status, no traceback); "
        "the logs verify afterwards.",
    ]
    notes = [n for t in tallies.values() for n in t.notes]
    fails = [f"{name}: {f}" for name, t in tallies.items() for f in t.failures]
    if fails:
        lines += ["", "## Failures", "", *(f"- {f}" for f in fails)]
    if notes:
        lines += ["", "## Notes", "", *(f"- {n}" for n in notes[:20])]
    return "\n".join(lines) + "\n"
