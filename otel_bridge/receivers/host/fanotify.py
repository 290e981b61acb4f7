"""fanotify file events for the ``linux`` backend, kernel-attributed to the accessing process.

``fanotify_init`` / ``fanotify_mark`` through ctypes (``FAN_CLASS_NOTIF``). A filesystem mark
(``FAN_MARK_FILESYSTEM``, default) or a mount mark covers every file below each configured path;
events of processes outside the lineage are dropped here. Two groups:

* the **file group** (open, close-write, modify, access) runs in ``FAN_REPORT_DFID_NAME`` mode
  (Linux 5.9): each event carries the accessing pid, the parent directory's file handle and the
  entry's name, and the kernel opens no descriptor. The directory is resolved with
  ``open_by_handle_at`` (``CAP_DAC_READ_SEARCH``) on the marked mount of the event's filesystem
  and remembered per handle (:meth:`FanotifyWatcher._directory`), so a workload that touches
  many files in a few directories costs one resolution per directory. An event of a pid known
  to be another process's is dropped after reading its 24-byte header. When the kernel or a
  marked filesystem refuses that mode (``EINVAL`` before 5.9; ``EOPNOTSUPP`` on a filesystem
  without file handles, e.g. ``devpts``), or the opt-in content capture is on (it reads the
  file through the event's descriptor), the group runs in the classic mode instead: each event
  carries an open descriptor whose ``/proc/self/fd`` link names the file, resolved and closed
  here. The file collection's note says which mode runs, and why it fell back.
* the **directory-entry group** (create, delete, rename), always ``FAN_REPORT_DFID_NAME``.

What the path of an event means:

* handle-and-name mode: the entry's **name when the event happened** (the kernel copies it into
  the event), in its directory **as that directory is named when the event is read** (or when
  it was first resolved, below). A file written and renamed before the event is read is
  reported under the name it was written as; a file still open after it was deleted is
  reported under the name it had; a hard-linked file under the link it was opened through. A
  directory renamed after the event and before the read gives its new path; a directory
  deleted before the read cannot be named: the event is counted (``fanotify.unnamed``), not
  guessed. A resolved directory is remembered until the directory-entry group reports any
  directory renamed or deleted (read before the file group in each pass), which forgets them
  all; without that group (``rename`` not configured, or refused) for one read pass only. What
  stays stale: an event in a directory renamed while the pass that reads it runs (after the
  directory-entry group was read) is named under the directory's previous path; a directory
  moved by a mount change is never seen.
* classic mode: the file as its descriptor names it **when the event is read**: a file renamed
  before the read is reported under its new name, a deleted one as ``PATH (deleted)``; hard
  links and directories as above.

Honest limits of both modes:

* fanotify does not report the *open flags* the process used, so ``file.open`` carries no
  ``file.open.flags``/``file.access``. Writes show up as ``file.write``: by default when a file
  that was open for writing is closed (``FAN_CLOSE_WRITE``: the process had write access; a
  writable open closed without writing is reported too), or, with ``modify`` configured, at the
  first ``FAN_MODIFY`` of each open/close cycle (exact, but one kernel event per ``write()``).
  Reads show up as ``file.read`` (``FAN_ACCESS``, when configured).
* create, delete and rename come from the directory-entry group. A rename is one ``FAN_RENAME``
  event with both names (Linux 5.17). When that group cannot be set up (an old kernel, a
  filesystem without file handles), the file collection says so and those changes are not
  reported (``strace``/``ebpf`` see the syscalls).
* A short-lived child often touches a file before the process connector's fork event for it has
  been read, so its pid is not in the lineage yet. Such events are held (the path resolved) and
  reported once the pid joins the lineage, with its identity. Whether it joins is decided by
  queue order, not by a timeout: a child's fork is queued on the process connector before any
  file event of the child, so once the process source (:attr:`FanotifyWatcher.lineage_read`)
  has drained its queue in a pass that began after the event was handled, a pid still not in
  the lineage is another process on the machine: its event is dropped and counted, and its
  further events are skipped unread for 5 s (their headers read; in classic mode their
  descriptors closed). A reader late by seconds under load loses nothing
  (it used to: a 0.25 s grace dropped the children of a late process reader). Without a process
  source (a watcher used alone) the grace period is 0.25 s; held events wait at most 30 s.
* fanotify events carry no time: a record's time is when it was read, or the exit of its
  process (:attr:`FanotifyWatcher.exited_at`) when that came first: every event of a process
  was queued before its exit. So a reader late under load does not stamp a child's read after
  the next child's write of the same file (``compare``'s ``observed_dataflow`` orders them by
  time). :attr:`FanotifyWatcher.drained_at` says up to when every queued event was handled: the
  ``linux`` backend keeps an exited pid in the lineage until then.
* How late that time is has no fixed bound (the pacing below, and a reader scheduled late on a
  loaded machine: 40 to 64 ms at a load average of 7), so a file record states the earliest
  its event can have happened, measured, when that is more than the pacing period before its
  time (a record stating none was read within it): ``evidence.earliest_time_unix_nano``
  (:data:`~otel_bridge.stamping.EARLIEST_TIME`), the wall time taken before the reader last
  found every queue empty before it read the event (:attr:`FanotifyWatcher.since_ns`: before a
  pass whose ``select`` returned at once, or after one that waited, then reading every group
  until it is empty; before the groups were opened, for the first pass and the events read
  while armed). An event held for its pid, or merged, keeps the one it was read with (a merged
  record, its first event's); never later than the record's time. The event happened between
  the two.
* **Paced reads.** The kernel merges an event into one of the same pid on the same entry
  (directory handle and name; directories and non-directories apart, a rename never) still
  waiting unread in the queue, OR-ing their masks. A busy queue is therefore read in paced
  batches (:meth:`FanotifyWatcher._pace`): once :data:`PACE_EVENTS` events were read within
  :data:`PACE_S`, the next read waits for that period to end (a stop or a follow does not
  wait). Sparse events are read at once. A record of an open or a write then stands for one or
  more opens (or writable closes) of that entry by that pid since the previous read, not one
  each; distinct pids, entries and kinds stay distinct records (the kernel never merges them).
  The pause adds up to :data:`PACE_S` to how long after the event its record's time is; the
  records of one read keep the queue's order, a merged event at the place of its first
  occurrence. The kernel merged whatever waited unread before pacing too: how many records a
  workload that reopens the same files gives always depended on how fast it was read.
* **Nothing followed.** While the lineage is empty (a standing collector before its first
  follow) and no follow is under way, every event is another process's: reads are dropped
  unparsed (:meth:`FanotifyWatcher._nothing_followed`), at most one per :data:`PACE_S`, and
  remembered directories forgotten (a queue overflow then loses nothing that could have been
  reported, and is not read).
* A process a standing collector starts following (:meth:`FanotifyWatcher.before_follow`) was
  not in the lineage: its events held or still queued then happened *before* the follow (or
  belong to an earlier process with the same pid). The follow waits for one full read pass of
  the queue, drops those events (``fanotify.before_follow``) and only then adds the pid, so
  nothing from before the follow is attributed to it (its follow record says that earlier
  activity is unknown). Held, they would flood its events after the follow: the agent's whole
  start-up reported as if done afterwards.
* Pseudo filesystems (``/proc``, ``/sys``) and filesystems not marked are not seen. Events can
  be lost when the kernel queue overflows (``FAN_Q_OVERFLOW``): the file collection becomes
  ``degraded``.
"""

from __future__ import annotations

import contextlib
import os
import select
import stat
import struct
import threading
import time
from collections.abc import Callable

from otel_bridge.arming import (
    DIRENT_BITS,
    FAN_ACCESS,
    FAN_CLOSE_NOWRITE,
    FAN_CLOSE_WRITE,
    FAN_CREATE,
    FAN_DELETE,
    FAN_MODIFY,
    FAN_NOFD,
    FAN_ONDIR,
    FAN_OPEN,
    FAN_Q_OVERFLOW,
    FAN_RENAME,
    FAN_REPORT_DFID_NAME,
    FanotifyGroups,
    PreRead,
    RawReads,
    fanotify_masks,
    fanotify_open,
    open_file_group,
)
from otel_bridge.arming import libc as _libc
from otel_bridge.model import AnyValue, CollectionState, LogRecord
from otel_bridge.receivers.host.events import SYSCALL, HostContext
from otel_bridge.receivers.host.filemerge import MERGED_KINDS, FileMerger, Held
from otel_bridge.receivers.host.release import release
from otel_bridge.stamping import EARLIEST_TIME, FANOTIFY_PACE_NS, FANOTIFY_PACE_S

__all__ = [
    "DIRENT_BITS",
    "FAN_CLOSE_WRITE",
    "FAN_OPEN",
    "FanotifyWatcher",
    "fanotify_open",
]

_METADATA = struct.Struct("=IBBHQii")
_INFO_HEADER = struct.Struct("=BBH")
_HANDLE_HEADER = struct.Struct("=Ii")
_FSID_SIZE = 8
_FSID = struct.Struct("=Q")
"""An event's ``__kernel_fsid_t`` as one number: the C library's ``statvfs`` ``f_fsid``."""
# fanotify_event_info_fid record types with a directory handle and an entry name
_DFID_NAME, _OLD_DFID_NAME, _NEW_DFID_NAME = 2, 10, 12
_FID_READ_BYTES = 64 * 1024
"""One read of a handle-and-name group (the kernel opens no descriptor)."""
_FD_READ_BYTES = 8 * 1024
"""One read of the descriptor-reporting group: the kernel opens a descriptor for every event it
copies, so a large read of a long queue (an armed backlog) would hold thousands open at once
(past ``select``'s 1024 limit for every other reader of the process): at most ~340 here."""
_GRACE = 0.25
"""Seconds an event of a not-yet-known pid waits for the pid to join the lineage, when no process
source says how far it has read (:attr:`FanotifyWatcher.lineage_read`)."""
_HOLD_MAX = 30.0
"""Seconds an event of a not-yet-known pid waits at most for a late process source."""
_MAX_WAITING = 100_000
"""Events held at most while their pid is unknown (the rest are counted): an armed reader's
backlog of a busy machine's events is held at once, before the process source has read past it."""
_FOREIGN_FOR = 5.0
"""Seconds the events of a pid that did not join the lineage in time are skipped unread."""
_MAX_FOREIGN = 100_000
"""Foreign pids remembered at most (the table starts over when full)."""
_PROBE_AFTER = 0.002
"""Seconds a pass's ``select`` may take before the pass reads every group, ready or not (each
until it is empty), to move the next records' earliest time (:attr:`FanotifyWatcher.since_ns`)
past its wait."""
_SYNC_WAIT = 0.02
"""Seconds the reader waits at most for the process source's pass (:meth:`_decide_unknown`)."""
_REPLAY_SYNC_WAIT = 0.5
"""The same for the armed pre-reader's events, replayed while the process source starts."""
_SYNC_PAUSE = 0.25
"""Seconds the reader holds unknown pids' events without asking the process source first, after
it did not answer in time (:attr:`FanotifyWatcher.sync_lineage`)."""
_MAX_DIRECTORIES = 4096
"""Directory handles whose resolved path is remembered at most (the table starts over when
full): :meth:`FanotifyWatcher._directory`."""
_MAX_FILES = 16_384
"""File entries whose path is remembered at most (:meth:`FanotifyWatcher._file_path`)."""
_SPECIAL = frozenset((stat.S_IFIFO, stat.S_IFCHR, stat.S_IFBLK, stat.S_IFSOCK))
FOLLOW_SYNC_S = 2.0
"""How long :meth:`FanotifyWatcher.before_follow` waits for the reader's pass at most."""
PACE_S = FANOTIFY_PACE_S
"""Paced reading (:meth:`FanotifyWatcher._pace`): once :data:`PACE_EVENTS` events were read
within one such period, the next read waits for the period's end, so the kernel merges a pid's
identical events on one entry meanwhile. The most an event's read (its record's time) is
delayed by the pacing."""
PACE_EVENTS = 8
"""Events read within :data:`PACE_S` before the reader paces itself: sparser events are read
at once."""


def _paths(paths: tuple[str, ...] | list[str]) -> str:
    """The marked paths in a few words: the path when one, else how many."""
    return paths[0] if len(paths) == 1 and len(paths[0]) <= 40 else f"{len(paths)} paths"


class FanotifyWatcher:
    """Reads fanotify events and emits lineage file events (see the module docstring)."""

    def __init__(self, ctx: HostContext, *, armed: FanotifyGroups | None = None) -> None:
        """``armed``: groups opened before the collector was built (:mod:`otel_bridge.arming`),
        adopted when they were opened for this configuration, else left to their owner."""
        cfg = ctx.config
        self._ctx = ctx
        self.emit_for: Callable[[int, LogRecord], None] | None = None
        """Emits a record about a pid (the linux backend holds a child's records behind an exec
        still waiting for its image, :meth:`.starts.StartGate.emit_for`); None: emit at once."""
        self.lineage_read: Callable[[], float] | None = None
        """The process source's progress: the monotonic time at which its last pass that
        drained its queue began (every fork queued before then is in the lineage). None: no
        such source, an unknown pid's events wait ``_GRACE`` seconds."""
        self.sync_lineage: Callable[[float, float], bool] | None = None
        """``(after, timeout)``: True once the process source drained its queue in a pass begun
        after monotonic ``after`` (asked for, waited ``timeout`` s at most); None: no source."""
        self._sync_off_until = 0.0
        self.exited_at: Callable[[int], int | None] | None = None
        """The wall time (ns) of a lineage pid's exit when the process source has read it."""
        self.drained_at = 0.0
        """The monotonic time at which the last pass that left every queue empty began: every
        event queued before then has been handled (reported, held for its pid, or dropped)."""
        self.since_ns = 0
        """Wall ns from which every event not read yet was queued (the groups' opening, then
        each :meth:`_pass`): the next read's records' :data:`EARLIEST_TIME`."""
        self._wanted = set(cfg.fanotify_events)
        self._libc = _libc()
        self.unnamed = 0
        """Events whose directory could no longer be resolved (``fanotify.unnamed``)."""
        self.unattributed = 0
        """Events of pids that did not join the lineage within the grace period (nearly all
        are other processes on the machine)."""
        self.undecided = 0
        """Events dropped before the process source read past them (see :meth:`_undecided`)."""
        self._waiting: list[tuple[float, float, int, int, str | bytes, int, int]] = []
        """(handled at (monotonic), deadline, pid, mask, path or directory-entry records, read
        time ns, earliest time ns) of events held for a pid the lineage does not know yet."""
        self._foreign: dict[int, float] = {}
        """pid -> until when its events are skipped (it did not join the lineage in time)."""
        self._dirs: dict[bytes, str] = {}
        """fsid + directory handle -> its path when resolved (:meth:`_directory`)."""
        self._files: dict[bytes, str] = {}
        """A file event's directory-handle-and-name record -> the entry's path, "" for a FIFO or
        device node (forgotten with ``_dirs``): a file touched again costs one lookup."""
        self._pre: tuple[list[PreRead], RawReads, RawReads] = ([], [], [])
        """Events the armed pre-reader read before this watcher existed (replayed first)."""
        self._pre_since = 0
        """The armed pre-reader's ``since_ns`` when it stopped (0: none ran)."""
        window = cfg.file_merge_window if ctx.capture is None else 0.0
        self._merger = FileMerger(window) if window > 0 else None
        """Repeated file events of one process, file and kind folded into one record
        (:mod:`.filemerge`); None: one record per event read (or the content capture is on: it
        reads the file at each writable close)."""
        note = self._open_groups(armed)
        self._stop_r, self._stop_w = os.pipe()
        self._wake_r, self._wake_w = os.pipe()
        self._thread: threading.Thread | None = None
        self._passes = threading.Condition()
        self._pass_started = 0
        self._pass_done = 0
        self._pre_follow: set[int] = set()
        """Pids about to be followed: their events read until then are dropped, not held."""
        self.before_follow_dropped = 0
        """Events of followed processes read before the follow (not attributed)."""
        self._cycle: set[tuple[int, str, str]] = set()
        """(pid, path, kind) already reported in the current open/close cycle."""
        self._window = (0.0, 0)
        """(monotonic start, events read since) of the current pacing period (:meth:`_pace`)."""
        self.paced = 0
        """Reads the reader delayed to let the kernel merge (:meth:`_pace`)."""
        self.idle_reads = 0
        """Reads dropped unparsed while nothing was followed (:meth:`_nothing_followed`)."""
        self.overflows = 0
        events = ", ".join(sorted(self._wanted))
        ctx.collection_state(
            "file",
            CollectionState.AVAILABLE,
            f"fanotify {cfg.fanotify_mark} marks on {', '.join(cfg.fanotify_paths)} ({events}); "
            f"{note}",
            f"fanotify on {_paths(cfg.fanotify_paths)}",
        )

    def _open_groups(self, armed: FanotifyGroups | None) -> str:
        """Adopt ``armed`` when it was opened for this configuration, else open the groups;
        returns the file collection's note on how events name their file and what is missing."""
        ctx, cfg = self._ctx, self._ctx.config
        mask, _ = fanotify_masks(self._wanted)
        paths, mount = list(cfg.fanotify_paths), cfg.fanotify_mark == "mount"
        want_fid = ctx.capture is None  # the content capture reads through the event's fd
        adopt = armed is not None and armed.matches(
            self._wanted, paths, cfg.fanotify_mark, fid=want_fid
        )
        self._dir_fd = -1
        self._mount_fds: list[int] = []
        fid_error: OSError | None = None
        self.since_ns = time.time_ns()  # before the groups are opened (or adopted)
        if armed is not None and adopt:
            self.since_ns = armed.opened_ns
            if armed.reader is not None:
                self._pre = armed.reader.take()
                self._pre_since = armed.reader.since_ns
                armed.reader = None
            self._fid, fid_error = armed.reports_fid, armed.fid_error
            self._fd, self._dir_fd, self._mount_fds = armed.fd, armed.dir_fd, armed.mount_fds
            armed.fd, armed.dir_fd, armed.mount_fds = -1, -1, []
        else:
            self._fd = -1
            if mask:
                self._fd, fid_error = open_file_group(
                    fanotify_open, paths, mask, mount=mount, fid=want_fid
                )
            self._fid = self._fd >= 0 and want_fid and fid_error is None
        """Whether the file group reports directory handles and names (no descriptors)."""
        dirents = sorted(self._wanted & DIRENT_BITS.keys())
        dirent_note = ""
        if dirents and armed is not None and adopt:
            error = armed.dirent_error
            if error is not None:
                dirent_note = f"; {', '.join(dirents)} not reported: {error.strerror or error}"
        elif dirents:
            dirent_note = self._open_dirents(dirents, paths, mount=mount)
        if (self._fid or self._dir_fd >= 0) and not self._mount_fds:
            self._mount_fds = [os.open(path, os.O_RDONLY | os.O_CLOEXEC) for path in paths]
        self._fsid_fds: dict[int, int] = {}
        """Filesystem id -> the marked path's descriptor on it (handles resolve against it)."""
        for mount_fd in self._mount_fds:
            with contextlib.suppress(OSError):
                self._fsid_fds.setdefault(os.fstatvfs(mount_fd).f_fsid, mount_fd)
        self._dirs_per_pass = self._dir_fd < 0 or "rename" not in self._wanted
        """No directory renames are read: a resolved directory is remembered for one pass."""
        return (
            f"{self._mode_note(want_fid, fid_error)}; "
            f"no open flags (fanotify does not report them){dirent_note}; a busy queue is read "
            f"every {PACE_S * 1000:g} ms; a record's time is when it was read, within "
            f"{PACE_S * 1000:g} ms of its event unless it states {EARLIEST_TIME}, the earliest "
            "its event can have happened (when the queue was last found empty before)"
            + (
                f"; a process's repeated events of one kind on one file within "
                f"{self._merger.window:g} s are one record (evidence.merged_events)"
                if self._merger is not None
                else ""
            )
        )

    def _mode_note(self, want_fid: bool, error: OSError | None) -> str:
        """What the file collection's note says about how file events name their file."""
        if self._fid:
            return "directory handle and name per event (no descriptor)"
        if error is not None:
            return (
                f"a descriptor per event (FAN_REPORT_DFID_NAME refused: {error.strerror or error})"
            )
        return "a descriptor per event" + ("" if want_fid else " (the content capture reads it)")

    def _open_dirents(self, names: list[str], paths: list[str], *, mount: bool) -> str:
        """Set up the directory-entry group; returns what the collection note should add."""
        mask = fanotify_masks(set(names))[1]
        try:
            self._dir_fd = fanotify_open(paths, mask, mount=mount, report=FAN_REPORT_DFID_NAME)
        except OSError as exc:
            return f"; {', '.join(names)} not reported: {exc.strerror or exc}"
        return ""

    def start(self) -> None:
        """Start the reader thread."""
        self._thread = threading.Thread(target=self._run, name="host-fanotify", daemon=True)
        self._thread.start()

    def _replay(self) -> None:
        """The events the armed pre-reader read, with the times it read them at."""
        events, dirents, files = self._pre
        self._pre = ([], [], [])
        # every event here was read before now: once the process source has read past now,
        # an unknown pid's are another process's (see :meth:`_decide_unknown`)
        sync = self.sync_lineage
        some = bool(events or files)
        decided = some and sync is not None and sync(time.monotonic(), _REPLAY_SYNC_WAIT)
        lineage, until = self._ctx.lineage, time.monotonic() + _FOREIGN_FOR
        for at, mask, pid, path, since in events:
            self.since_ns = since
            if mask & FAN_Q_OVERFLOW:
                self._overflow()
            elif decided and pid not in lineage and pid not in self._pre_follow:
                self.unattributed += 1
                if len(self._foreign) >= _MAX_FOREIGN:
                    self._foreign.clear()
                self._foreign[pid] = until
            elif path:
                self._path_event(mask, pid, path, at)
        for at, data, since in dirents:
            self.since_ns = since
            self._chunk(data, at, dirents=True)
        for at, data, since in files:  # handles and names: a foreign pid's are skipped unread
            self.since_ns = since
            if decided:
                self._mark_foreign(self._unknown_pids(data, time.monotonic()))
            self._chunk(data, at, dirents=False)
        if self._pre_since:
            self.since_ns = self._pre_since  # what it left unread was queued after

    def _run(self) -> None:
        self._replay()
        while not self._pass():
            pass

    def _pass(self) -> bool:
        """One read pass: wait for events (or the merger's next due record), read every ready
        group until it is empty, report held and due records; True when stopping. Afterwards
        every event queued before :attr:`drained_at` (monotonic) and :attr:`since_ns` (wall)
        has been handled."""
        # directory renames first: a directory handle resolved before is forgotten
        # (:meth:`_forget_directories`) before the file events queued after the rename
        readers = [fd for fd in (self._dir_fd, self._fd) if fd >= 0]
        timeout = 0.05 if self._waiting else 0.5
        mark = time.time_ns()  # before ``began``: never later than the queue was empty
        began = time.monotonic()
        due = self._merger.next_due() if self._merger else None
        if due is not None:
            timeout = min(timeout, max(0.0, due - began))
        if self._dirs_per_pass:
            self._forget_directories()
        ready, _, _ = select.select([*readers, self._stop_r, self._wake_r], [], [], timeout)
        with self._passes:
            self._pass_started += 1
            this_pass = self._pass_started
        if self._wake_r in ready:
            os.read(self._wake_r, 4096)
        stopping = self._stop_r in ready
        every = stopping or self._wake_r in ready
        if time.monotonic() - began > _PROBE_AFTER:
            # select waited: read every group from here, so the next records' earliest time
            # is now, not before the wait (a group not ready costs one empty read)
            mark, every = time.time_ns(), True
        events = 0
        for fd in readers:
            if every or fd in ready:
                events += self._read(fd)
        if self._waiting:
            self._recheck(final=stopping)
        if self._merger:
            self._send_held(self._merger.flush() if stopping else self._merger.due())
        # a descriptor not ready was empty when select returned, the others were read until
        # empty: everything queued before ``began`` (and ``mark``) is handled
        self.drained_at = began
        self.since_ns = mark
        with self._passes:
            self._pass_done = this_pass
            self._passes.notify_all()
        if stopping:
            return True
        self._pace(events)
        return False

    def _pace(self, events: int) -> None:
        """Wait before the next read when the queue is busy: once :data:`PACE_EVENTS` events
        were read since the current period of :data:`PACE_S` began, until the period ends (a
        stop or a pass asked for ends the wait). Meanwhile the kernel merges a pid's identical
        events on one entry (its masks OR-ed) instead of queueing one event each, so a workload
        that reopens the same files costs one record per (pid, entry, kind) and period rather
        than one per open. Sparse events are read at once, unless nothing is followed (then
        every read is dropped anyway: at most one a period). See the module docstring."""
        now = time.monotonic()
        start, seen = self._window
        if now - start >= PACE_S:
            start, seen = now, 0
        seen += events
        if seen < PACE_EVENTS and not (events and self._idle()):
            self._window = (start, seen)
            return
        self.paced += 1
        select.select([self._stop_r, self._wake_r], [], [], max(0.0, start + PACE_S - now))
        self._window = (time.monotonic(), 0)

    def before_follow(self, pids: list[int]) -> bool:
        """Drop every event of ``pids`` read until :meth:`followed` (held ones too), after one
        full read pass of the queue; call before they join the lineage. False when the reader
        did not finish that pass within :data:`FOLLOW_SYNC_S` (events queued before the follow
        may then still be read after it). See the module docstring."""
        with self._passes:
            self._pre_follow.update(pids)
            running = self._thread is not None
            wanted = self._pass_started + 1  # a pass that starts after this call
        if not running:  # no reader thread (not started yet): this one reads the queue
            mark = time.time_ns()
            for fd in (self._dir_fd, self._fd):
                if fd >= 0:
                    self._read(fd)
            self._recheck(final=False)
            self.since_ns = mark
            return True
        os.write(self._wake_w, b"x")
        with self._passes:
            return self._passes.wait_for(lambda: self._pass_done >= wanted, FOLLOW_SYNC_S)

    def followed(self, pids: list[int]) -> None:
        """``pids`` joined the lineage (or will not): their events are reported from now."""
        with self._passes:
            self._pre_follow.difference_update(pids)

    def _before_follow(self, pid: int) -> bool:
        """True (and counted) for an event of a pid about to be followed: not attributed."""
        if pid not in self._pre_follow:
            return False
        self.before_follow_dropped += 1
        self._ctx.telemetry.count("fanotify.before_follow")
        return True

    def _recheck(self, *, final: bool, now: float | None = None) -> None:
        """Events of pids the lineage did not know when they were read: usually a child that
        forked, touched a file and exited before the process connector's fork event was read.
        Each is reported once its pid joins the lineage (its identity is known by then), or
        dropped and counted once the process source has read past it (module docstring); a
        pid that never joined is then skipped for a while (another process on the machine).
        ``now``: the monotonic time to judge at (default: now)."""
        now = time.monotonic() if now is None else now
        read_to = self.lineage_read() if self.lineage_read is not None else None
        keep: list[tuple[float, float, int, int, str | bytes, int, int]] = []
        current = self.since_ns
        for held in self._waiting:
            handled, deadline, pid, mask, payload, at, since = held
            if self._before_follow(pid):
                continue  # held before its follow: not its events from then on
            if pid in self._ctx.lineage:
                self.since_ns = since  # its records' earliest time: as when it was read
                try:
                    if isinstance(payload, str):
                        self._file_event(mask, pid, payload, at)
                    else:
                        self._dirent(mask, pid, payload, 0, len(payload), at)
                finally:
                    self.since_ns = current
            elif not final and now < deadline and (read_to is None or read_to < handled):
                keep.append(held)
            else:
                if not final and read_to is not None and read_to < handled:
                    self._undecided()  # the process source is still behind: whose is unknown
                self.unattributed += 1
                if len(self._foreign) >= _MAX_FOREIGN:
                    self._foreign.clear()
                self._foreign[pid] = now + _FOREIGN_FOR
        self._waiting = keep

    def _read(self, fanotify_fd: int) -> int:
        """Read ``fanotify_fd`` until it is empty; returns how many events were read."""
        dirents = fanotify_fd == self._dir_fd
        size = _FID_READ_BYTES if dirents or self._fid else _FD_READ_BYTES
        events = 0
        while True:
            try:
                data = os.read(fanotify_fd, size)
            except BlockingIOError:
                return events
            except OSError:
                return events
            if not data:
                return events
            if self._nothing_followed(data):
                events += len(data) // _METADATA.size  # at most: for pacing only
                continue
            if not dirents and self.sync_lineage is not None:
                self._decide_unknown(data, time.monotonic())
            events += self._chunk(data, time.time_ns(), dirents=dirents)

    def _idle(self) -> bool:
        """True while nothing is followed, about to be followed or held for its pid."""
        return self._ctx.lineage.empty() and not self._pre_follow and not self._waiting

    def _nothing_followed(self, data: bytes) -> bool:
        """True (the read dropped unparsed) when no event of it can be reported: nothing is
        followed, about to be followed or held, so every event is another process's. A pid
        joins an empty lineage only through a follow (:meth:`before_follow` marks it first and
        drops what was read before) and a lineage pid's child only once that pid is followed.
        In the classic mode every event's descriptor is closed (the headers are read)."""
        if not self._idle():
            return False
        if not self._fid:
            offset = 0
            while offset + _METADATA.size <= len(data):
                length, _vers, _res, _mlen, _mask, fd, _pid = _METADATA.unpack_from(data, offset)
                if length < _METADATA.size:
                    break
                if fd >= 0:
                    os.close(fd)
                offset += length
        if self._dirs:
            self._forget_directories()  # a directory renamed meanwhile is not read
        self.idle_reads += 1
        return True

    def _decide_unknown(self, data: bytes, handled: float) -> None:
        """Decide whose the events of one read are, for pids the lineage does not know, before
        any of their paths is resolved: every event of the read was queued before
        ``handled`` (the read returned then), and a child's fork is queued on the process
        connector before any file event of the child, so once the process source has drained
        its queue in a pass that began after ``handled``, a pid still not in the lineage is
        another process on the machine (the rule of :meth:`_recheck`, decided at once instead of
        one poll later). Its events are dropped after reading their header (in the classic
        mode, their descriptors closed unread) and counted, and its pid skipped for a while.
        When the source does not answer in time the events are held as before."""
        unknown = self._unknown_pids(data, time.monotonic())
        if not unknown or time.monotonic() < self._sync_off_until or self.sync_lineage is None:
            return
        if not self.sync_lineage(handled, _SYNC_WAIT):
            self._sync_off_until = time.monotonic() + _SYNC_PAUSE
            return
        self._mark_foreign(unknown)

    def _unknown_pids(self, data: bytes, now: float) -> dict[int, int]:
        """pid -> events in one read of the file group, for each pid neither in the lineage,
        about to be followed, nor skipped already (headers only)."""
        lineage, foreign, following = self._ctx.lineage, self._foreign, self._pre_follow
        no_fd_ok = self._fid  # in the classic mode an event without a descriptor is skipped
        unknown: dict[int, int] = {}
        offset, size = 0, _METADATA.size
        while offset + size <= len(data):
            length, _vers, _res, _mlen, mask, fd, pid = _METADATA.unpack_from(data, offset)
            if length < size:
                break
            offset += length
            if mask & FAN_Q_OVERFLOW or (fd < 0 and not no_fd_ok):
                continue
            if foreign.get(pid, 0.0) > now or pid in following or pid in lineage:
                continue
            unknown[pid] = unknown.get(pid, 0) + 1
        return unknown

    def _mark_foreign(self, unknown: dict[int, int]) -> None:
        """Count and skip (``_FOREIGN_FOR`` s) the pids of ``unknown`` still not in the lineage
        now that the process source has read past their events."""
        lineage, foreign, following = self._ctx.lineage, self._foreign, self._pre_follow
        until = time.monotonic() + _FOREIGN_FOR
        for pid, events in unknown.items():
            if pid not in lineage and pid not in following:
                self.unattributed += events
                if len(foreign) >= _MAX_FOREIGN:
                    foreign.clear()
                foreign[pid] = until

    def _chunk(self, data: bytes, at: int, *, dirents: bool) -> int:
        """The events of one read, read at ``at`` (ns); returns how many there were."""
        fid = self._fid and not dirents
        lineage, foreign, now = self._ctx.lineage, self._foreign, time.monotonic()
        offset = events = 0
        while offset + _METADATA.size <= len(data):
            length, _vers, _res, mlen, mask, fd, pid = _METADATA.unpack_from(data, offset)
            if length < _METADATA.size:
                return events
            events += 1
            if fid and foreign.get(pid, 0.0) > now and pid not in lineage:
                pass  # a pid skipped for a while: its header read, nothing else
            elif dirents:
                self._dirent(mask, pid, data, offset + mlen, offset + length, at)
            elif fid:
                self._fid_event(mask, pid, data, offset + mlen, offset + length, at)
            else:
                self._event(mask, fd, pid, at)
            offset += length
        return events

    def _overflow(self) -> None:
        self.overflows += 1
        self._ctx.collection_state(
            "file",
            CollectionState.DEGRADED,
            "fanotify queue overflow: events lost",
            "fanotify on its paths; events lost (queue overflow)",
        )

    def _event(self, mask: int, fd: int, pid: int, at: int) -> None:
        try:
            if mask & FAN_Q_OVERFLOW:
                self._overflow()
                return
            if fd == FAN_NOFD:
                return
            ctx = self._ctx
            known = pid in ctx.lineage
            if not known and self._is_foreign(pid):
                return
            try:
                path = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                return
            if known and mask & FAN_CLOSE_WRITE and ctx.capture is not None:
                # opt-in content capture: read the bytes this close left through the event's fd
                self._file_event(mask, pid, path, at)
                ctx.capture.at_close(fd, path)
                return
        finally:
            if fd >= 0:
                os.close(fd)
        self._path_event(mask, pid, path, at)

    def _fid_event(  # noqa: PLR0917 (the hot path: one call per event)
        self, mask: int, pid: int, data: bytes, start: int, end: int, at: int
    ) -> None:
        """An event of the file group in handle-and-name mode: no descriptor to close, so a
        pid skipped (foreign, or about to be followed) costs reading its header only."""
        if mask & FAN_Q_OVERFLOW:
            self._overflow()
            return
        known = pid in self._ctx.lineage
        if not known and (self._is_foreign(pid) or self._before_follow(pid)):
            return
        path = self._file_path(data, start, end)
        if path is None:
            self._unnamed()
        elif not path:
            return
        elif known:
            self._file_event(mask, pid, path, at)
        else:
            self._wait(pid, mask, path, at)

    def _unnamed(self) -> None:
        self.unnamed += 1
        self._ctx.telemetry.count("fanotify.unnamed")

    def _path_event(self, mask: int, pid: int, path: str, at: int) -> None:
        """An event of ``path`` read at ``at``: reported, held for its pid, or skipped."""
        if pid in self._ctx.lineage:
            self._file_event(mask, pid, path, at)
        elif not self._is_foreign(pid) and not self._before_follow(pid):
            self._wait(pid, mask, path, at)

    def _file_event(self, mask: int, pid: int, path: str, now: int) -> None:
        """An open, read, write or close of ``path`` by lineage process ``pid``, read at ``now``."""
        if mask & FAN_OPEN and "open" in self._wanted:
            if self._cycle:
                self._cycle = {c for c in self._cycle if c[:2] != (pid, path)}
            self._emit("file.open", pid, path, now)
        if mask & FAN_ACCESS and "access" in self._wanted:
            self._once("file.read", pid, path, now)
        if mask & FAN_MODIFY and "modify" in self._wanted:
            self._once("file.write", pid, path, now)
        if mask & FAN_CLOSE_WRITE:
            if "modify" not in self._wanted and "close_write" in self._wanted:
                self._emit("file.write", pid, path, now)
            if self._cycle:
                self._cycle = {c for c in self._cycle if c[:2] != (pid, path)}
        if mask & FAN_CLOSE_NOWRITE and self._cycle:
            self._cycle.discard((pid, path, "file.read"))

    def _undecided(self) -> None:
        """An event dropped before the process source read past it (it was ``_HOLD_MAX`` s
        behind): it may have been the lineage's, so the file collection says events may be
        missing."""
        self.undecided += 1
        if self.undecided == 1:
            self._ctx.collection_state(
                "file",
                CollectionState.DEGRADED,
                f"file events of unknown pids dropped after {_HOLD_MAX:g} s while the process "
                "connector was still behind: the lineage's may be among them",
                "fanotify on its paths; some events of unknown processes dropped",
            )

    def _is_foreign(self, pid: int) -> bool:
        """True while ``pid`` is remembered as outside the lineage (its events are skipped)."""
        until = self._foreign.get(pid)
        if until is None:
            return False
        if until > time.monotonic():
            return True
        del self._foreign[pid]
        return False

    def _wait(self, pid: int, mask: int, payload: str | bytes, at: int = 0) -> None:
        """Hold an event (read at ``at`` ns, 0: now) of a pid the lineage does not know yet
        (see :meth:`_recheck`)."""
        if len(self._waiting) < _MAX_WAITING:
            now = time.monotonic()
            wait = _GRACE if self.lineage_read is None else _HOLD_MAX
            self._waiting.append(
                (now, now + wait, pid, mask, payload, at or time.time_ns(), self.since_ns)
            )
        else:
            if self.lineage_read is not None:
                self._undecided()
            self.unattributed += 1

    def _dirent(  # noqa: PLR0917 (the hot path: one call per event)
        self, mask: int, pid: int, data: bytes, start: int, end: int, now: int
    ) -> None:
        """A create, delete or rename event (read at ``now``): directory handles and names
        follow the metadata."""
        if mask & FAN_Q_OVERFLOW:
            self._overflow()
            return
        if mask & FAN_ONDIR and mask & (FAN_RENAME | FAN_DELETE):
            self._forget_directories()  # whoever moved it: paths below it may have changed
        if pid not in self._ctx.lineage:
            if not self._is_foreign(pid) and not self._before_follow(pid):
                self._wait(pid, mask, data[start:end], now)
            return
        names: dict[int, str] = {}
        offset = start
        while offset + _INFO_HEADER.size <= end:
            info_type, _pad, length = _INFO_HEADER.unpack_from(data, offset)
            if length < _INFO_HEADER.size:
                break
            if info_type in (_DFID_NAME, _OLD_DFID_NAME, _NEW_DFID_NAME):
                path = self._entry_path(data, offset, offset + length)
                if path is None:
                    self._unnamed()
                    return
                names[info_type] = path
            offset += length
        if mask & FAN_RENAME:
            old, new = names.get(_OLD_DFID_NAME), names.get(_NEW_DFID_NAME)
            if old is not None and new is not None:
                self._emit("file.rename", pid, old, now, new_path=new)
        elif _DFID_NAME in names:
            if mask & FAN_CREATE:
                self._emit("file.create", pid, names[_DFID_NAME], now)
            elif mask & FAN_DELETE:
                self._emit("file.delete", pid, names[_DFID_NAME], now)

    def _entry_path(self, data: bytes, start: int, end: int) -> str | None:
        """The path of the entry named in the first directory-handle record between ``start``
        and ``end``, or None if it has none or its directory cannot be resolved."""
        if start + _INFO_HEADER.size > end:
            return None
        info_type, _pad, _length = _INFO_HEADER.unpack_from(data, start)
        if info_type not in (_DFID_NAME, _OLD_DFID_NAME, _NEW_DFID_NAME):
            return None  # a handle without a name: not an entry
        handle_at = start + _INFO_HEADER.size + _FSID_SIZE
        size, _kind = _HANDLE_HEADER.unpack_from(data, handle_at)
        name_at = handle_at + _HANDLE_HEADER.size + size
        directory = self._directory(data[start + _INFO_HEADER.size : name_at])
        if directory is None:
            return None
        name = data[name_at:end].split(b"\0", 1)[0]
        return os.path.join(directory, os.fsdecode(name)) if name else directory

    def _file_path(self, data: bytes, start: int, end: int) -> str | None:
        """:meth:`_entry_path` of a file event, remembered per record; "" for a FIFO or a
        device node, whose opens only this mode reports (the classic mode never saw them, and
        ``observe``'s own gate is a FIFO): checked once per entry (``lstat``; an entry gone by
        then is reported)."""
        record = data[start:end]
        path = self._files.get(record)
        if path is not None:
            return path
        path = self._entry_path(data, start, end)
        if path is None:
            return None
        with contextlib.suppress(OSError):
            if stat.S_IFMT(os.lstat(path).st_mode) in _SPECIAL:
                path = ""
        if len(self._files) >= _MAX_FILES:
            self._files.clear()
        self._files[record] = path
        return path

    def _forget_directories(self) -> None:
        self._dirs.clear()
        self._files.clear()

    def _directory(self, key: bytes) -> str | None:
        """The path of the directory of ``key`` (its filesystem id and handle, as in the event)
        now: ``open_by_handle_at`` on the marked mount of that filesystem, remembered
        until a directory is renamed or deleted (or for one pass when no directory renames are
        read, ``_dirs_per_pass``). None: it is gone (deleted) or on no marked mount."""
        directory = self._dirs.get(key)
        if directory is not None:
            return directory
        handle = key[_FSID_SIZE:]
        on = self._fsid_fds.get(_FSID.unpack_from(key)[0])
        for mount_fd in self._mount_fds if on is None else (on,):
            fd = int(self._libc.open_by_handle_at(mount_fd, handle, os.O_PATH | os.O_CLOEXEC))
            if fd < 0:
                continue
            try:
                directory = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                return None
            finally:
                os.close(fd)
            if directory.endswith(" (deleted)"):
                return None
            if len(self._dirs) >= _MAX_DIRECTORIES:
                self._dirs.clear()
            self._dirs[key] = directory
            return directory
        return None

    def _once(self, name: str, pid: int, path: str, now: int) -> None:
        key = (pid, path, name)
        if key not in self._cycle:
            self._cycle.add(key)
            self._emit(name, pid, path, now)

    def _emit(self, name: str, pid: int, path: str, now: int, *, new_path: str = "") -> None:
        ctx = self._ctx
        exited = self.exited_at(pid) if self.exited_at is not None else None
        if exited is not None and exited < now:
            now = exited  # read after the process exited: it happened before the exit
        merger = self._merger
        merged = merger is not None and name in MERGED_KINDS
        if merged and merger is not None:
            creation = ctx.events.identity(pid).get("process.creation.time")
            if merger.fold(name, pid, path, now, creation):
                return  # a repeat of a held record: only its count and last time change
        # the earliest time only when it says more than the pacing period (see EARLIEST_TIME)
        since = self.since_ns
        earliest = since if now - since > FANOTIFY_PACE_NS else None
        attrs: dict[str, AnyValue] = ctx.events.identity_attrs(pid)
        if merged and merger is not None:
            self._send_held(merger.add(name, pid, path, now, attrs, earliest))
            return
        attrs["file.path"] = path
        if earliest is not None:
            attrs[EARLIEST_TIME] = earliest
        if new_path:
            attrs["file.new_path"] = new_path
        self._send(name, pid, now, attrs)

    def _send_held(self, records: list[Held]) -> None:
        """Emit merged records (:mod:`.filemerge`), their time the first event's, and count the
        events folded into them (``fanotify.merged_events``: once per call, not per event)."""
        folded = 0
        for held in records:
            folded += held.count - 1
            self._send(held.name, held.pid, held.first_ns, held.final_attrs())
        if folded:
            self._ctx.telemetry.count("fanotify.merged_events", folded)

    def _send(self, name: str, pid: int, now: int, attrs: dict[str, AnyValue]) -> None:
        record = self._ctx.events.record(name, now, attrs, attribution=SYSCALL, causal=True)
        if self.emit_for is not None:
            self.emit_for(pid, record)
        else:
            self._ctx.emit(record)

    def stop(self) -> None:
        """Stop reading and close the descriptor. Safe twice."""
        if self._thread is not None:
            os.write(self._stop_w, b"x")
            self._thread.join()
            self._thread = None
        if self._merger:  # read before the reader ran (:meth:`before_follow`), never sent
            self._send_held(self._merger.flush())
        groups = [fd for fd in (self._fd, self._dir_fd) if fd >= 0]
        release(lambda: _close_all(groups))  # marks torn down: a grace period
        for fd in (self._stop_r, self._stop_w, self._wake_r, self._wake_w, *self._mount_fds):
            if fd >= 0:
                os.close(fd)
        self._fd = self._dir_fd = self._stop_r = self._stop_w = self._wake_r = self._wake_w = -1
        self._mount_fds = []


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
