"""One worker of the safety test: a process that locks a key on one dlockd,
reads a counter from the fenced resource with its fence, holds the lock for a
while, writes counter + 1 with its fence and unlocks, over and over, and logs
every step to a file of its own. A campaign worker (the election scenarios)
does the same as a leader: CAMPAIGN key <its id> in place of LOCK, its term
as the fence, now and then a PROCLAIM of a new value while it leads, and
RESIGN in place of UNLOCK.

    python3 -m faults.worker CONFIG_JSON     (tests/ on PYTHONPATH)

CONFIG_JSON is a JSON object (see safety.py, Scenario.worker_config): id,
kind, daemon, daemon_port, resource_port, key, ttl, wait, log, seed,
hold_short / hold_long ([lo, hi] ms), long_frac, checkin_ms, extend_frac,
prepare_ms ([lo, hi]: between the last check and the write), pause ([lo, hi]
ms between two locks), io_timeout (s), campaign (bool), proclaim_frac (the
share of terms in which a campaign worker proclaims once).

Kinds of client:
  py2       redis-py (RESP2), told of a loss by the -LOST reply to a command
  raw2      a raw socket, RESP2, likewise
  raw3      a raw socket, HELLO 3 without pushes, likewise
  raw3push  a raw socket, HELLO 3 and CLIENT LOSTPUSH ON: told by the push,
            which it reads (without blocking) while it holds the lock, and
            again by the -LOST reply to its next command

Workers that take no pushes send PING every checkin_ms while they hold the
lock and right before they write (docs/protocol.md 5: a command before every step
that needs the lock); push workers poll their socket as often.

The log: one JSON object per line, written with a single write() (the worker
may be SIGKILLed at any moment), each with "t" (time.monotonic(): the
CLOCK_MONOTONIC of this machine, comparable between processes), "w" (the
worker id) and "ev":

  start        pid, kind, daemon
  connected    a session is open (after HELLO 3 / CLIENT LOSTPUSH ON)
  connect_fail err
  lock_sent    n (a sequence number), cmd (LOCK or CAMPAIGN)
  grant        n, fence, validity, token, plan (ms it means to hold)
  lock_null    n: not granted within WAIT
  lock_err     n, err (-BACKEND: retried after a pause)
  told         how (push, lost_err, closed, timeout), fence (None if not
               said), sent (when the command whose reply told was sent),
               cmd, err
  checkin      cmd, sent, reply: a command answered normally while holding
  extend_sent  ms, fence               extend  ms, sent, reply, fence
  proclaim_sent  value, fence          proclaim  value, sent, reply, fence
  read_ok      fence, value, sent       read_rejected  fence, err, sent
  write_sent   fence, value             write_ok / write_rejected  fence, value, err
  abandon      fence, why: the holder was told before it wrote
  prepare      fence: checked that it still holds, writes after prepare_ms
  stall        start, gap: the worker itself ran late by gap s (descheduled)
  unlock_sent  fence, cmd (UNLOCK or RESIGN)   unlock_reply   fence, reply
  conn_lost    where, err
  stray        value: a reply where none was expected
  error        text (a traceback: the worker failed)
  exit
"""

import json
import os
import random
import re
import signal
import sys
import time
import traceback

from dlocktest import resp

from faults import fenced

NOTICE_RE = re.compile(r"^LOST (\S+) (\d+) (.*)$", re.S)
STALL_SLACK = 0.05  # a loop iteration later than planned by this much is a stall


class Told(Exception):
    """The session was told that its lock is lost, or the connection closed."""


class Worker:
    def __init__(self, cfg):
        self.cfg = cfg
        self.id = cfg["id"]
        self.kind = cfg["kind"]
        self.key = cfg["key"]
        self.ttl = int(cfg["ttl"])
        self.rng = random.Random(cfg.get("seed", 0))
        self.fd = os.open(cfg["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.stop = False
        self.conn = None      # resp.Conn, or a redis.Redis for py2
        self.res = None       # resp.Conn to the resource
        self.holding = None   # fence of the lock believed held
        self.told = False     # told that holding is lost
        self.n = 0            # LOCKs sent
        self.writes = 0
        self.proclaims = 0    # PROCLAIMs sent
        # a leader's CAMPAIGN and RESIGN, or a holder's LOCK and UNLOCK
        self.campaign = bool(cfg.get("campaign"))

    # ---- log ----

    def log(self, ev, **kw):
        kw["t"] = kw.get("t") or time.monotonic()
        kw["w"] = self.id
        kw["ev"] = ev
        os.write(self.fd, (json.dumps(kw, separators=(",", ":")) + "\n").encode())

    # ---- the daemon session ----

    def connect(self):
        """Open a session; False (logged) if it could not be done."""
        port = self.cfg["daemon_port"]
        try:
            if self.kind == "py2":
                import redis
                c = redis.Redis(host="127.0.0.1", port=port, single_connection_client=True,
                                socket_timeout=self.cfg["io_timeout"],
                                socket_connect_timeout=2.0)
                c.execute_command("PING")
            else:
                c = resp.Conn(port, on_push=self.on_push)
                if self.kind in ("raw3", "raw3push"):
                    r = c.cmd("HELLO", "3", timeout=self.cfg["io_timeout"])
                    if not isinstance(r, dict):
                        c.close()
                        raise OSError("HELLO 3 answered %r" % (r,))
                if self.kind == "raw3push":
                    r = c.cmd("CLIENT", "LOSTPUSH", "ON", timeout=self.cfg["io_timeout"])
                    if r != "OK":
                        c.close()
                        raise OSError("CLIENT LOSTPUSH ON answered %r" % (r,))
        except Exception as e:  # refused while a daemon restarts, a timeout, ...
            self.log("connect_fail", err=repr(e)[:200])
            return False
        self.conn = c
        self.log("connected")
        return True

    def hangup(self):
        c, self.conn = self.conn, None
        if c is None:
            return
        try:
            if self.kind == "py2":
                c.connection_pool.disconnect()
                if c.connection is not None:
                    c.connection.disconnect()
            else:
                c.close()
        except Exception:
            pass

    def lost_connection(self, where, err, sent=None, cmd=None):
        """The session is gone: whatever it held is lost, and told now."""
        how = "timeout" if "imeout" in type(err).__name__ else "closed"
        if self.holding is not None and not self.told:
            self.told = True
            self.log("told", how=how, fence=self.holding, sent=sent, cmd=cmd,
                     err=repr(err)[:200])
        self.log("conn_lost", where=where, err=repr(err)[:200])
        self.hangup()

    def on_push(self, p):
        if len(p) >= 3 and p[0] == b"lost":
            key = p[1].decode(errors="replace")
            fence = p[2]
            self.log("told", how="push", fence=fence, key=key,
                     err=(p[3].decode(errors="replace") if len(p) > 3 else ""))
            if key == self.key and fence == self.holding:
                self.told = True
        else:
            self.log("stray", value=repr(p)[:200])

    def call(self, *args):
        """Send a command and return (reply, sent); errors are resp.Err. A
        -LOST notice (the reply in place of this command) is logged as told
        and raised as Told; a closed connection is logged and raised as Told.
        """
        sent = time.monotonic()
        try:
            if self.kind == "py2":
                r = self.py2_call(*args)
            else:
                r = self.conn.cmd(*args, timeout=self.cfg["io_timeout"])
        except (resp.Closed, resp.Timeout) as e:
            self.lost_connection(args[0], e, sent=sent, cmd=args[0])
            raise Told()
        if isinstance(r, resp.Err):
            m = NOTICE_RE.match(r)
            if m:
                fence = int(m.group(2))
                self.log("told", how="lost_err", fence=fence, key=m.group(1), sent=sent,
                         cmd=args[0], err=str(r)[:200])
                if m.group(1) == self.key and fence == self.holding:
                    self.told = True
                    raise Told()
                # a loss of an earlier lock: the command was not run
                return self.call(*args)
        return r, sent

    def py2_call(self, *args):
        """A command through redis-py, its outcomes as resp's."""
        import redis
        try:
            return self.conn.execute_command(*args)
        except redis.exceptions.ResponseError as e:
            return resp.Err(str(e))
        except redis.exceptions.TimeoutError as e:
            raise resp.Timeout(repr(e))
        except (redis.exceptions.ConnectionError, OSError) as e:
            raise resp.Closed(repr(e))

    # ---- the resource ----

    def res_call(self, *args):
        """A call to the resource; one that takes longer than STALL_SLACK
        (the resource is a local redis-server: this one ran late) is logged
        as a stall, since the holder may still believe meanwhile."""
        if self.res is None:
            self.res = resp.Conn(self.cfg["resource_port"])
        t0 = time.monotonic()
        r = self.res.cmd(*args, timeout=30.0)
        took = time.monotonic() - t0
        if took > STALL_SLACK:
            self.log("stall", start=t0, gap=round(took, 4))
        return r

    # ---- one round ----

    def pause(self, lo_hi):
        lo, hi = lo_hi
        time.sleep(self.rng.uniform(lo, hi) / 1000.0)

    def sleep(self, seconds):
        """Sleep while holding; a wake-up later than planned by more than
        STALL_SLACK is logged as a stall (the worker was descheduled)."""
        t0 = time.monotonic()
        time.sleep(seconds)
        late = time.monotonic() - t0 - seconds
        if late > STALL_SLACK:
            self.log("stall", start=t0, gap=round(late, 4))

    def plan(self):
        """How long to hold the next lock (ms)."""
        if self.rng.random() < self.cfg["long_frac"]:
            return self.rng.uniform(*self.cfg["hold_long"])
        return self.rng.uniform(*self.cfg["hold_short"])

    def round(self):
        if self.conn is None and not self.connect():
            time.sleep(self.rng.uniform(0.02, 0.06))
            return
        self.n += 1
        n = self.n
        if self.campaign:
            cmd = ("CAMPAIGN", self.key, self.id)
        else:
            cmd = ("LOCK", self.key)
        self.log("lock_sent", n=n, cmd=cmd[0])
        try:
            r, sent = self.call(*cmd, "TTL", self.ttl, "WAIT", self.cfg["wait"])
        except Told:
            return
        if r is None:
            self.log("lock_null", n=n)
            return
        if isinstance(r, resp.Err):
            self.log("lock_err", n=n, err=str(r)[:200])
            self.pause((20, 80))
            return
        if not (isinstance(r, list) and len(r) == 3):
            self.log("stray", value=repr(r)[:200])
            self.hangup()
            return
        token, fence, validity = r
        plan = self.plan()
        self.holding = fence
        self.told = False
        t_grant = time.monotonic()
        self.log("grant", t=t_grant, n=n, fence=fence, validity=validity,
                 token=token.decode() if isinstance(token, bytes) else token,
                 plan=round(plan), sent=sent)
        try:
            self.hold(fence, t_grant, plan)
        except Told:
            pass
        self.unlock(fence)
        self.holding = None
        self.told = False

    def alive(self):
        """Whether the holding is still believed: for push workers, read the
        pushes that are there."""
        if self.told:
            return False
        if self.kind == "raw3push" and self.conn is not None:
            try:
                stray = self.conn.poll(0)
            except resp.Closed as e:
                self.lost_connection("poll", e)
                return False
            for v in stray:
                self.log("stray", value=repr(v)[:200])
        return not self.told

    def checkin(self):
        """PING the daemon (workers without pushes); raises Told."""
        r, sent = self.call("PING")
        self.log("checkin", cmd="PING", sent=sent, reply=str(r)[:40])

    def wait(self, until, fence, extend_at, proclaim_at):
        """Hold until the monotonic time until, checking in (or polling for
        pushes) every checkin_ms, EXTEND once at extend_at and PROCLAIM once
        at proclaim_at (each if not None). Raises Told."""
        step = self.cfg["checkin_ms"] / 1000.0
        while True:
            now = time.monotonic()
            if now >= until:
                return
            sl = min(step, until - now)
            t0 = time.monotonic()
            if self.kind == "raw3push":
                try:
                    stray = self.conn.poll(sl)
                except resp.Closed as e:
                    self.lost_connection("poll", e)
                    raise Told()
                for v in stray:
                    self.log("stray", value=repr(v)[:200])
                if self.told:
                    raise Told()
                t1 = time.monotonic()
                # the worker itself ran late (descheduled): a stall
                if t1 - t0 > sl + STALL_SLACK:
                    self.log("stall", start=t0, gap=round(t1 - t0 - sl, 4))
            else:
                self.sleep(sl)
                t1 = time.monotonic()
            if extend_at is not None and t1 >= extend_at:
                extend_at = None
                self.extend(fence)
            elif proclaim_at is not None and t1 >= proclaim_at:
                proclaim_at = None
                self.proclaim(fence)
            elif self.kind != "raw3push":
                self.checkin()

    def extend(self, fence):
        ms = self.rng.choice([self.ttl, self.ttl * 5 // 4, self.ttl])
        self.log("extend_sent", ms=ms, fence=fence)
        r, sent = self.call("EXTEND", self.key, ms)
        self.log("extend", ms=ms, sent=sent, reply=str(r)[:200], fence=fence)

    def proclaim(self, fence):
        """A new value for the term fence: the worker's id and a number."""
        self.proclaims += 1
        value = "%s/%d" % (self.id, self.proclaims)
        self.log("proclaim_sent", value=value, fence=fence)
        r, sent = self.call("PROCLAIM", self.key, value)
        self.log("proclaim", value=value, sent=sent, reply=str(r)[:200], fence=fence)
        if isinstance(r, resp.Err) and r.code == "LOST":
            # the term was lost: PROCLAIM's own -LOST tells it (docs/protocol.md)
            if not self.told:
                self.told = True
                self.log("told", how="lost_err", fence=fence, key=self.key, sent=sent,
                         cmd="PROCLAIM", err=str(r)[:200])
            raise Told()

    def hold(self, fence, t_grant, plan):
        sent = time.monotonic()
        r = self.res_call(*fenced.read_args(self.key, fence))
        if isinstance(r, resp.Err):
            self.log("read_rejected", fence=fence, err=str(r)[:200], sent=sent)
            return
        value = r
        self.log("read_ok", fence=fence, value=value, sent=sent)
        until = t_grant + plan / 1000.0
        extend_at = proclaim_at = None
        if self.rng.random() < self.cfg["extend_frac"]:
            extend_at = self.rng.uniform(t_grant, until)
        if self.campaign and self.rng.random() < self.cfg.get("proclaim_frac", 0):
            proclaim_at = self.rng.uniform(t_grant, until)
        self.wait(until, fence, extend_at, proclaim_at)
        # a step that needs the lock: make sure it is still held
        if self.kind == "raw3push":
            if not self.alive():
                self.log("abandon", fence=fence, why="told before the write")
                return
        else:
            self.checkin()
        # the time a real client takes between its check and its write
        self.log("prepare", fence=fence)
        lo, hi = self.cfg.get("prepare_ms", (0, 0))
        self.sleep(self.rng.uniform(lo, hi) / 1000.0)
        self.writes += 1
        tag = "%s:%d" % (self.id, self.writes)
        self.log("write_sent", fence=fence, value=value + 1, tag=tag)
        r = self.res_call(*fenced.write_args(self.key, fence, value + 1, tag))
        if isinstance(r, resp.Err):
            self.log("write_rejected", fence=fence, value=value + 1, tag=tag, err=str(r)[:200])
        else:
            self.log("write_ok", fence=fence, value=value + 1, tag=tag)

    def unlock(self, fence):
        if self.conn is None:
            return
        cmd = "RESIGN" if self.campaign else "UNLOCK"
        self.log("unlock_sent", fence=fence, cmd=cmd)
        try:
            r, _ = self.call(cmd, self.key)
        except Told:
            return
        self.log("unlock_reply", fence=fence, reply=str(r)[:200])

    def run(self):
        self.log("start", pid=os.getpid(), kind=self.kind, daemon=self.cfg["daemon"])
        while not self.stop:
            self.round()
            if not self.stop:
                self.pause(self.cfg["pause"])
        self.hangup()
        self.log("exit")


def main(cls):
    """The process of a worker or an observer (cls): cls(the JSON object of
    argv[1]).run() until SIGTERM sets its stop; a failure is logged as an
    "error" event and exits 1."""
    p = cls(json.loads(sys.argv[1]))

    def on_term(signum, frame):
        p.stop = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the orchestrator decides
    try:
        p.run()
    except Exception:
        p.log("error", text=traceback.format_exc()[-2000:])
        sys.exit(1)
    sys.exit(0)


if __name__ == "__main__":
    main(Worker)
