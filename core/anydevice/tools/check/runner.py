"""The parent side of ``anydevice check``: workers in parallel, each stage under a deadline.

Device types are grouped by plugin; each group is a job. Jobs go to worker processes
(``python -m anydevice.tools.check --worker``, see :mod:`.worker`), at most :func:`parallel_workers`
busy at once; a worker that finished a job takes the next one, so a run starts only a few
interpreters. Plugins registered in this process (tests, bring-up) exist only here, so their
job runs in a thread instead. The parent never imports a plugin module.

Every stage a worker announces, and every device inside a check, gets ``timeout`` seconds; past
that the worker is killed (a thread is abandoned), the stage is reported as timed out, and the
job's device types that did not start go to another worker. A worker whose stage has run for a
while without news does not count as busy, so a hang never holds back the other jobs.
"""
from __future__ import annotations

import io
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

from anydevice.tools.check.checks import FAILED, TIMED_OUT, describe
from anydevice.tools.check.worker import IMPORT, Channel, work

DEFAULT_TIMEOUT = 20.0
STARTUP = "startup"
#: A stage running this long without news makes its worker not count as busy.
QUIET_AFTER = 1.0
_POSIX = os.name == "posix"


def parallel_workers() -> int:
    """How many workers may be busy at once: 2 to 4, by the number of cores."""
    return min(4, max(2, os.cpu_count() or 2))


@dataclass
class Job:
    """Device types one worker checks in order, ``[(type, specs or None)]``; or the plugins' aliases."""

    types: list
    in_process: bool = False
    aliases: bool = False

    def payload(self, quick: bool) -> dict:
        return {"aliases": True} if self.aliases else {"types": [list(t) for t in self.types], "quick": quick}


class _Worker:
    """A worker and the job it runs: what it is doing now, its deadline, where its output splits."""

    def __init__(self, wid: int, timeout: float):
        self.wid, self.timeout, self.job = wid, timeout, None
        self.offset = 0              # where the next job's output starts in the capture

    def begin(self, job: Job) -> None:
        self.job, self.done = job, False
        self.stage, self.type, self.plugin, self.device = STARTUP, None, None, None
        self.stage_started = time.monotonic()
        self._news(self.stage_started)
        self.marks: list = [(self.offset, None)]    # (output offset, owner) where owner is ("type"|"plugin", name)
        self.ended: set = set()
        self.results: set = set()                    # (type, check) whose result arrived

    def _news(self, now: float) -> None:
        self.last_news = now
        self.deadline = now + self.timeout

    def on_start(self, ev: dict) -> None:
        self.stage, self.type, self.plugin, self.device = ev["stage"], ev.get("type"), ev.get("plugin"), None
        self.stage_started = time.monotonic()
        self._news(self.stage_started)
        owner = ("plugin", self.plugin) if self.stage == IMPORT and self.plugin else \
            ("type", self.type) if self.type else None
        self.marks.append((int(ev.get("at") or 0), owner))

    def on_device(self, ev: dict) -> None:
        self.device = ev.get("device")
        self._news(time.monotonic())

    def busy(self, now: float) -> bool:
        """Running a job and heard from lately (a quiet one is blocked, or at least not using the CPU much)."""
        return self.job is not None and now - self.last_news < QUIET_AFTER

    def outputs(self, end: int | None = None):
        """``(owner, text)`` for what was printed during each stage of the current job."""
        data = self.output()
        end = len(data) if end is None else end
        self.offset = end
        marks = self.marks + [(end, None)]
        carry = ""
        for (start, owner), (stop, _) in zip(marks, marks[1:]):
            chunk = data[start:stop]
            text = carry + (chunk.decode("utf-8", "replace") if isinstance(chunk, bytes) else chunk)
            carry = "" if owner else text
            if owner and text:
                yield owner, text
        first = next((o for _, o in self.marks if o), None)
        if carry and first:
            yield first, carry

    def describe_exit(self) -> str:
        return "stopped"


class _Process(_Worker):
    """A child interpreter taking jobs one per line on stdin; events on its stdout, prints in a capture file."""

    def start(self, events: queue.Queue) -> None:
        fd, self.path = tempfile.mkstemp(prefix="anydevice-check-", suffix=".log")
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "anydevice.tools.check", "--worker"],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=fd,
                                         env=_child_env(), start_new_session=_POSIX, text=True)
        finally:
            os.close(fd)
        threading.Thread(target=_pump, args=(events, self.wid, self.proc.stdout), daemon=True).start()

    def assign(self, job: Job, quick: bool) -> None:
        self.begin(job)
        try:
            self.proc.stdin.write(json.dumps(job.payload(quick)) + "\n")
            self.proc.stdin.flush()
        except OSError:
            pass  # it died: its end of events follows, and the job is reported as failed

    def close(self) -> None:
        """Let an idle worker exit on its own (it reads no more jobs)."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL) if _POSIX else self.proc.kill()
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        self.proc.wait()

    def reap(self) -> None:
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.stop()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        try:
            os.unlink(self.path)
        except OSError:
            pass

    def output(self) -> bytes:
        with open(self.path, "rb") as f:
            return f.read()

    def describe_exit(self) -> str:
        rc = self.proc.wait()
        if rc < 0:
            try:
                return f"was killed by signal {signal.Signals(-rc).name}"
            except ValueError:
                return f"was killed by signal {-rc}"
        return f"exited with status {rc}"


def _pump(events: queue.Queue, wid: int, stream) -> None:
    try:
        for line in stream:
            try:
                events.put((wid, json.loads(line)))
            except ValueError:
                continue
    except (OSError, ValueError):
        pass
    finally:
        events.put((wid, None))


def _child_env() -> dict:
    """This environment, with this interpreter's import path (so the child sees the same plugins)."""
    path = [p for p in sys.path if p and os.path.exists(p)]
    return dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join(path))


class _Abandoned(BaseException):
    """Unwinds an abandoned thread at its next event (not an Exception: no check catches it)."""


class _Thread(_Worker):
    """One job of in-process plugins in a daemon thread; stdout/stderr go to a buffer meanwhile."""

    abandoned = False

    def assign(self, job: Job, quick: bool) -> None:
        self.begin(job)
        self.buffer = io.StringIO()
        sys.stdout = sys.stderr = self.buffer
        ch = Channel(self._send, self.buffer.tell)
        threading.Thread(target=self._main, args=(ch, job.payload(quick)), daemon=True).start()

    def _send(self, line: str) -> None:
        if self.abandoned:
            raise _Abandoned
        self._events.put((self.wid, json.loads(line)))

    def start(self, events: queue.Queue) -> None:
        self._events = events

    def _main(self, ch: Channel, payload: dict) -> None:
        try:
            work(payload, ch, quiet=False)  # run() silenced fallback warnings for the whole process
        except _Abandoned:
            pass
        except BaseException as e:  # noqa: BLE001 - reported as the stage that was running
            self._events.put((self.wid, {"ev": "crash", "reason": describe(e)}))
        finally:
            self._events.put((self.wid, None))

    def stop(self) -> None:
        """A thread cannot be killed: it is abandoned, and stops at its next event if it ever gets there."""
        self.abandoned = self.job is not None

    def close(self) -> None:
        pass

    reap = close

    def output(self) -> str:
        return self.buffer.getvalue()


class Runner:
    """Runs jobs, feeding every event to ``report`` (a :class:`.report.Report`)."""

    def __init__(self, report, timeout: float, quick: bool, parallel: int | None = None):
        self.report, self.timeout, self.quick = report, timeout, quick
        self.parallel = parallel or parallel_workers()
        self.events: queue.Queue = queue.Queue()
        self.workers: dict = {}
        self._ids = 0

    def run(self, jobs: list) -> None:
        self.pending = list(jobs)
        saved = sys.stdout, sys.stderr
        try:
            while self.pending or any(w.job is not None for w in self.workers.values()):
                self._launch()
                self._step()
        finally:
            sys.stdout, sys.stderr = saved
            for w in self.workers.values():
                w.close() if w.job is None else w.stop()
            for w in self.workers.values():
                w.reap()

    def _new(self, cls) -> _Worker:
        self._ids += 1
        w = cls(self._ids, self.timeout)
        self.workers[w.wid] = w
        w.start(self.events)
        return w

    def _launch(self) -> None:
        now = time.monotonic()
        for job in list(self.pending):
            if job.in_process:
                if any(isinstance(w, _Thread) and w.job is not None for w in self.workers.values()):
                    continue  # in-process jobs share this process's state: one at a time
                w = self._new(_Thread)
            else:
                w = next((w for w in self.workers.values() if isinstance(w, _Process) and w.job is None), None)
                if w is None and sum(w.busy(now) for w in self.workers.values()) >= self.parallel:
                    continue
                w = w or self._new(_Process)
            self.pending.remove(job)
            w.assign(job, self.quick)

    def _step(self) -> None:
        running = [w for w in self.workers.values() if w.job is not None]
        wake = min(w.deadline for w in running) if running else time.monotonic() + QUIET_AFTER
        if self.pending:
            wake = min([wake] + [w.last_news + QUIET_AFTER for w in running if w.busy(time.monotonic())])
        try:
            wid, ev = self.events.get(timeout=max(wake - time.monotonic(), 0.0) + 0.01)
        except queue.Empty:
            for w in [w for w in running if w.deadline <= time.monotonic()]:
                self._abandon(w, TIMED_OUT)
            return
        w = self.workers.get(wid)
        if w is None:
            return  # an abandoned worker
        if ev is None:
            if w.job is not None:
                self._abandon(w, FAILED)
            else:
                del self.workers[wid]
                w.reap()
        elif ev.get("ev") == "crash":
            w.crash = ev.get("reason", "")
        elif w.job is not None:
            self._handle(w, ev)

    def _handle(self, w: _Worker, ev: dict) -> None:
        kind = ev.get("ev")
        if kind == "start":
            w.on_start(ev)
            self.report.started(ev)
        elif kind == "device":
            w.on_device(ev)
        elif kind == "end":
            w.ended.add(ev.get("type"))
        elif kind == "done":
            self._collect(w, int(ev.get("at") or 0) or None)
            w.job = None
            if not self.pending:
                w.close()  # nothing left for it: let it exit while the others finish
        else:
            if kind == "check":
                w.results.add((ev.get("type"), ev["result"]["name"]))
            self.report.apply(ev)

    def _collect(self, w: _Worker, end: int | None = None) -> None:
        for owner, text in w.outputs(end):
            self.report.add_output(owner, text)

    def _abandon(self, w: _Worker, status: str) -> None:
        """Stop ``w``, report the stage it was in, and queue its device types that did not start."""
        del self.workers[w.wid]
        w.stop()
        self._collect(w)
        w.reap()
        hit = self.report.abandon(w, status, self._why(w, status))
        rest = [(t, s) for t, s in w.job.types if t not in w.ended and t not in hit]
        if rest:
            self.pending.insert(0, Job(rest, w.job.in_process))

    def _why(self, w: _Worker, status: str) -> str:
        what = {
            STARTUP: "starting the check process",
            IMPORT: f"importing the plugin {w.plugin}",
            "environment": f"the plugin's anydevice_environment({w.type!r}) hook",
            "runtime": f"creating the {w.type} runtime (anydevice_create_runtime, kernels, device probes)",
        }.get(w.stage)
        if what is None:
            what = f"the {w.stage} check" + (f" on {w.device}" if w.device else "")
            if (w.type, w.stage) in w.results:
                what = f"plugin code running after the {w.stage} check"
        if status == TIMED_OUT:
            return f"timed out in stage {w.stage!r}: {what} did not finish within {self.timeout:g} s"
        crash = getattr(w, "crash", "")
        how = f"raised {crash}" if crash else f"the check process {w.describe_exit()}"
        return f"failed in stage {w.stage!r}: {how} during {what}"
