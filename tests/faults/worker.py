"""One worker of the safety test: a process that locks a key on one dlockd,
reads a counter from the fenced resource with its fence, holds the lock for a
while, writes counter + 1 with its fence and unlocks, over and over, and logs
every step to a file of its own. A campaign worker (the election scenarios)
does the same as a leader: CAMPAIGN key <its id> in place of LOCK, its term
as the fence, now and then a PROCLAIM of a new value while it leads, and
RESIGN in place of UNLOCK. A set worker (the multi-key scenarios) takes a set
of 2 or 3 keys of the pool at once with one LOCKALL (a random subset in a
random order), reads and writes each key's counter with that key's fence, and
gives the set back with UNLOCKALL; after a null or an error it asks LOCKS
whether any key of the set was left held (it must not be).

    python3 -m faults.worker CONFIG_JSON     (tests/ on PYTHONPATH)

CONFIG_JSON is a JSON object (see safety.py, Scenario.worker_config): id,
kind, daemon, daemon_port, resource_port, key, ttl, wait, log, seed,
hold_short / hold_long ([lo, hi] ms), long_frac, checkin_ms, extend_frac,
prepare_ms ([lo, hi]: between the last check and the write), pause ([lo, hi]
ms between two locks), io_timeout (s), campaign (bool), proclaim_frac (the
share of terms in which a campaign worker proclaims once), lockall (bool: a
set worker), pool (the keys a set worker draws its sets from), set_size
([lo, hi] keys a set).

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
  lock_sent    n (a sequence number), cmd (LOCK, CAMPAIGN or LOCKALL),
               keys (LOCKALL: the keys asked, in the order sent)
  grant        n, fence, validity, token, plan (ms it means to hold);
               LOCKALL: keys (asked) and set, the answer's entries in
               order, each {key, fence, validity, token} (key, fence None
               where the entry is not a grant: the daemon answered part of
               a set, and the worker hangs up)
  lock_null    n: not granted within WAIT (LOCKALL: keys)
  lock_err     n, err (-BACKEND: retried after a pause) (LOCKALL: keys)
  probe        n, keys, held (the keys of keys that LOCKS lists), reply:
               after a LOCKALL's null or error
  told         how (push, lost_err, closed, timeout), fence (None if not
               said), key, sent (when the command whose reply told was
               sent), cmd, err; waiting: true on the loss of a key that a
               LOCKALL took while it waited for a later one, and which was
               never granted: a push, or the -LOST in place of the reply
               to a later command when the LOCKALL answered null or an
               error first (when the -LOST is its answer, it is logged as
               lock_err)
  checkin      cmd, sent, reply: a command answered normally while holding
  extend_sent  ms, fence               extend  ms, sent, reply, fence
  proclaim_sent  value, fence          proclaim  value, sent, reply, fence
  read_ok      fence, value, sent       read_rejected  fence, err, sent
  write_sent   fence, value             write_ok / write_rejected  fence, value, err
  abandon      fence, why: the holder was told before it wrote
  prepare      fence: checked that it still holds, writes after prepare_ms
  stall        start, gap: the worker itself ran late by gap s (descheduled)
  unlock_sent  fence, cmd (UNLOCK, RESIGN or UNLOCKALL: keys, fences)
  unlock_reply fence, reply (UNLOCKALL: keys)

Every event about one key's holding (read, write, extend, prepare, abandon,
unlock) has its key too.
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


class AnswerError(Exception):
    """The daemon answered what the protocol does not allow (a part of a
    set): the worker closes the session."""


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
        self.held = {}        # key -> fence of each lock believed held
        self.lost = set()     # keys of held told lost
        self.told = False     # told that a lock of held is lost
        self.waiting = ()     # the keys of the last LOCKALL, if not granted
        self.asking = False   # a LOCKALL awaits its answer
        self.n = 0            # LOCKs sent
        self.writes = 0
        self.proclaims = 0    # PROCLAIMs sent
        # a leader's CAMPAIGN and RESIGN, or a holder's LOCK and UNLOCK
        self.campaign = bool(cfg.get("campaign"))
        # a set holder's LOCKALL and UNLOCKALL
        self.lockall = bool(cfg.get("lockall"))

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
        if self.held and not self.told:
            self.told = True
            for key, fence in self.held.items():
                if key not in self.lost:
                    self.log("told", how=how, fence=fence, key=key, sent=sent, cmd=cmd,
                             err=repr(err)[:200])
            self.lost.update(self.held)
        self.log("conn_lost", where=where, err=repr(err)[:200])
        self.hangup()

    def on_push(self, p):
        if len(p) >= 3 and p[0] == b"lost":
            key = p[1].decode(errors="replace")
            fence = p[2]
            # a key a LOCKALL took and lost while it waited for a later
            # one: the LOCKALL will answer -LOST (docs/protocol.md, LOCKALL)
            waiting = {"waiting": True} if self.unanswered(key) else {}
            self.log("told", how="push", fence=fence, key=key,
                     err=(p[3].decode(errors="replace") if len(p) > 3 else ""), **waiting)
            self.lose(key, fence)
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
            if m and self.unanswered(m.group(1)):
                if self.asking:
                    # LOCKALL's own answer: a key it took was lost while it
                    # waited for a later one, and it gave them all back
                    return r, sent
                # told after the LOCKALL's null or error answer
                self.log("told", how="lost_err", fence=int(m.group(2)), key=m.group(1),
                         sent=sent, cmd=args[0], err=str(r)[:200], waiting=True)
                return self.call(*args)
            if m:
                fence = int(m.group(2))
                self.log("told", how="lost_err", fence=fence, key=m.group(1), sent=sent,
                         cmd=args[0], err=str(r)[:200])
                if self.lose(m.group(1), fence):
                    raise Told()
                # a loss of an earlier lock: the command was not run
                return self.call(*args)
        return r, sent

    def unanswered(self, key):
        """Whether key is one of the last LOCKALL's, not granted."""
        return key in self.waiting and key not in self.held

    def lose(self, key, fence):
        """A loss of (key, fence) told: whether it is one of held's."""
        if key not in self.held or self.held[key] != fence:
            return False
        self.told = True
        self.lost.add(key)
        return True

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

    def draw(self):
        """A set worker's next set: 2 or 3 keys of the pool (set_size), a
        random subset in a random order."""
        lo, hi = self.cfg.get("set_size", (2, 3))
        pool = self.cfg["pool"]
        return self.rng.sample(pool, min(len(pool), self.rng.randint(lo, hi)))

    def round(self):
        if self.conn is None and not self.connect():
            time.sleep(self.rng.uniform(0.02, 0.06))
            return
        self.n += 1
        n = self.n
        about = {}  # what the events of a LOCKALL add: its keys
        if self.lockall:
            keys = self.draw()
            cmd = ("LOCKALL", len(keys)) + tuple(keys)
            about["keys"] = keys
        elif self.campaign:
            keys = [self.key]
            cmd = ("CAMPAIGN", self.key, self.id)
        else:
            keys = [self.key]
            cmd = ("LOCK", self.key)
        self.log("lock_sent", n=n, cmd=cmd[0], **about)
        self.waiting = keys if self.lockall else ()
        self.asking = True
        try:
            r, sent = self.call(*cmd, "TTL", self.ttl, "WAIT", self.cfg["wait"])
        except Told:
            return
        finally:
            self.asking = False
        if r is None or isinstance(r, resp.Err):
            if r is None:
                self.log("lock_null", n=n, **about)
            else:
                self.log("lock_err", n=n, err=str(r)[:200], **about)
            if self.lockall:
                self.probe(n, keys)
            if r is not None:
                self.pause((20, 80))
            return
        plan = self.plan()
        if self.lockall:
            entries = [self.entry(keys[i] if i < len(keys) else None, e)
                       for i, e in enumerate(r)] if isinstance(r, list) else []
            grants = [(e["key"], e["fence"]) for e in entries if e["fence"] is not None]
            t_grant = time.monotonic()
            self.log("grant", t=t_grant, n=n, keys=keys, set=entries, plan=round(plan),
                     sent=sent)
            if len(grants) != len(keys) or len(entries) != len(keys):
                # a part of a set: the worker writes nothing with it, and
                # closes the session, which releases whatever it holds
                self.held, self.lost, self.told = dict(grants), set(), False
                self.waiting = ()
                self.lost_connection("lockall", AnswerError(
                    "LOCKALL of %d keys answered %s" % (len(keys), repr(r)[:200])))
                self.held = {}
                return
        else:
            if not (isinstance(r, list) and len(r) == 3):
                self.log("stray", value=repr(r)[:200])
                self.hangup()
                return
            token, fence, validity = r
            grants = [(self.key, fence)]
            t_grant = time.monotonic()
            self.log("grant", t=t_grant, n=n, fence=fence, validity=validity,
                     token=token.decode() if isinstance(token, bytes) else token,
                     plan=round(plan), sent=sent)
        self.held, self.lost, self.told = dict(grants), set(), False
        self.waiting = ()
        try:
            self.hold(grants, t_grant, plan)
        except Told:
            pass
        if self.lockall:
            self.unlock_set(grants)
        else:
            self.unlock(*grants[0])
        self.held, self.lost, self.told = {}, set(), False

    @staticmethod
    def entry(key, e):
        """One entry of a LOCKALL answer as the grant event logs it: {key,
        fence, validity, token}, or {key: None, fence: None, raw} where it
        is not LOCK's answer (or there is no key asked for it)."""
        if (key is not None and isinstance(e, list) and len(e) == 3 and
                isinstance(e[0], (bytes, str)) and
                all(isinstance(v, int) and not isinstance(v, bool) for v in e[1:])):
            token = e[0].decode(errors="replace") if isinstance(e[0], bytes) else e[0]
            return {"key": key, "fence": e[1], "validity": e[2], "token": token}
        return {"key": None, "fence": None, "raw": repr(e)[:100]}

    def probe(self, n, keys):
        """After a LOCKALL's null or error: LOCKS must list no key of the
        set (nothing of it is held); a session that kept some is closed, so
        that the next round starts with nothing held."""
        try:
            r, _ = self.call("LOCKS")
        except Told:
            return
        held = []
        if isinstance(r, list):
            for e in r:
                if isinstance(e, list) and e:
                    k = e[0].decode(errors="replace") if isinstance(e[0], bytes) else e[0]
                    if k in keys:
                        held.append(k)
            reply = "%d lock(s)" % len(r)
        else:
            reply = str(r)[:200]
        self.log("probe", n=n, keys=keys, held=held, reply=reply)
        if held:
            self.hangup()

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

    def wait(self, until, grants, extend_at, proclaim_at):
        """Hold until the monotonic time until, checking in (or polling for
        pushes) every checkin_ms, EXTEND one of grants ((key, fence)) once
        at extend_at and PROCLAIM once at proclaim_at (each if not None).
        Raises Told."""
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
                self.extend(*self.rng.choice(grants))
            elif proclaim_at is not None and t1 >= proclaim_at:
                proclaim_at = None
                self.proclaim(grants[0][1])
            elif self.kind != "raw3push":
                self.checkin()

    def extend(self, key, fence):
        ms = self.rng.choice([self.ttl, self.ttl * 5 // 4, self.ttl])
        self.log("extend_sent", ms=ms, fence=fence, key=key)
        r, sent = self.call("EXTEND", key, ms)
        self.log("extend", ms=ms, sent=sent, reply=str(r)[:200], fence=fence, key=key)

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
                self.lose(self.key, fence)
                self.log("told", how="lost_err", fence=fence, key=self.key, sent=sent,
                         cmd="PROCLAIM", err=str(r)[:200])
            raise Told()

    def hold(self, grants, t_grant, plan):
        """Read each key's counter with its fence (grants: [(key, fence)]),
        hold until plan ms after the grant, then write each counter + 1 with
        its fence, checking before each write that the locks are still
        held. Raises Told."""
        reads = []
        for key, fence in grants:
            sent = time.monotonic()
            r = self.res_call(*fenced.read_args(key, fence))
            if isinstance(r, resp.Err):
                self.log("read_rejected", fence=fence, key=key, err=str(r)[:200], sent=sent)
                continue
            self.log("read_ok", fence=fence, key=key, value=r, sent=sent)
            reads.append((key, fence, r))
        if not reads:
            return
        until = t_grant + plan / 1000.0
        extend_at = proclaim_at = None
        if self.rng.random() < self.cfg["extend_frac"]:
            extend_at = self.rng.uniform(t_grant, until)
        if self.campaign and self.rng.random() < self.cfg.get("proclaim_frac", 0):
            proclaim_at = self.rng.uniform(t_grant, until)
        self.wait(until, grants, extend_at, proclaim_at)
        for key, fence, value in reads:
            # a step that needs the lock: make sure it is still held
            if self.kind == "raw3push":
                if not self.alive():
                    self.log("abandon", fence=fence, key=key, why="told before the write")
                    return
            else:
                self.checkin()
            # the time a real client takes between its check and its write
            self.log("prepare", fence=fence, key=key)
            lo, hi = self.cfg.get("prepare_ms", (0, 0))
            self.sleep(self.rng.uniform(lo, hi) / 1000.0)
            self.writes += 1
            tag = "%s:%d" % (self.id, self.writes)
            self.log("write_sent", fence=fence, key=key, value=value + 1, tag=tag)
            r = self.res_call(*fenced.write_args(key, fence, value + 1, tag))
            if isinstance(r, resp.Err):
                self.log("write_rejected", fence=fence, key=key, value=value + 1, tag=tag,
                         err=str(r)[:200])
            else:
                self.log("write_ok", fence=fence, key=key, value=value + 1, tag=tag)

    def unlock(self, key, fence):
        if self.conn is None:
            return
        cmd = "RESIGN" if self.campaign else "UNLOCK"
        self.log("unlock_sent", fence=fence, key=key, cmd=cmd)
        try:
            r, _ = self.call(cmd, key)
        except Told:
            return
        self.log("unlock_reply", fence=fence, key=key, reply=str(r)[:200])

    def unlock_set(self, grants):
        """UNLOCKALL the keys of grants ((key, fence)) not told lost. A
        -NOTHELD names a key the session no longer holds: again without it.
        An answer that leaves it unsure what is still held closes the
        session (which releases everything)."""
        for _ in range(len(grants) + 2):
            if self.conn is None:
                return
            keep = [(k, f) for k, f in grants if k not in self.lost]
            if not keep:
                return
            keys = [k for k, _ in keep]
            self.log("unlock_sent", cmd="UNLOCKALL", keys=keys, fences=[f for _, f in keep])
            try:
                r, _ = self.call("UNLOCKALL", len(keys), *keys)
            except Told:
                continue  # a loss told in its place: again without that key
            self.log("unlock_reply", keys=keys, reply=str(r)[:200])
            if isinstance(r, resp.Err) and r.code == "NOTHELD":
                named = sorted((k for k in keys if k in r), key=len, reverse=True)
                if named:
                    self.lost.add(named[0])
                    continue
            if isinstance(r, list) and len(r) == len(keys):
                return
            break
        self.hangup()

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
