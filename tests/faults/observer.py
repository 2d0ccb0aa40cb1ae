"""One observer of the safety test's election scenarios: a process that
follows one key on one dlockd with a loop of OBSERVE key AFTER rev WAIT ms on
a connection of its own, and logs every answer to a file of its own.

    python3 -m faults.observer CONFIG_JSON     (tests/ on PYTHONPATH)

CONFIG_JSON is a JSON object (see safety.py, Scenario.observer_config): id,
kind (raw2, or raw3: HELLO 3 first), daemon, daemon_port, key, wait ([lo,
hi]: the WAIT of each OBSERVE, ms), log, seed, io_timeout (s).

Each connection is an epoch: it begins with LEADER key (the state now), then
asks OBSERVE key AFTER r WAIT ms again and again, r the revision of the
answer before (docs/protocol.md, OBSERVE). Revisions count the changes of a
daemon's life, as that daemon learnt of them (on a remote backend, through
the backend, whichever daemon made them): when the connection is lost (its
daemon was killed and started again) the observer connects again and begins
a new epoch from LEADER.

The log: one JSON object per line, written with a single write(), each with
"t" (time.monotonic(), as the workers'), "o" (the observer id) and "ev":

  start         pid, client (raw2 or raw3), daemon, key
  epoch         n, sent, and the state: the LEADER answer that begins epoch n
  state         n, sent, after, and the state: an OBSERVE answer
  none          n, sent, after: an OBSERVE whose WAIT ran out
  connect_fail  err
  conn_lost     n, err
  backend       n, cmd, err: LEADER (or OBSERVE) answered -BACKEND (a
                remote backend its daemon could not read: a fault); tried
                again on a new connection
  bad           n, cmd, value: an answer that is not a state (an error)
  error         text (a traceback: the observer failed)
  exit

A state is rev, term, value (text, or null), kind (free, exclusive, shared,
semaphore) and holders.
"""

import json
import os
import random
import time

from dlocktest import resp

from faults import worker


def state_of(reply):
    """A LEADER or OBSERVE answer ([value, term, revision, kind, holders]) as
    a dict (rev, term, value, kind, holders), None if it is not one."""
    if not (isinstance(reply, list) and len(reply) == 5):
        return None
    value, term, rev, kind, holders = reply
    if not (isinstance(term, int) and isinstance(rev, int) and isinstance(holders, int)):
        return None
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    elif value is resp.NULL:
        value = None
    if isinstance(kind, bytes):
        kind = kind.decode(errors="replace")
    return {"rev": rev, "term": term, "value": value, "kind": kind, "holders": holders}


class Observer:
    def __init__(self, cfg):
        self.cfg = cfg
        self.id = cfg["id"]
        self.key = cfg["key"]
        self.rng = random.Random(cfg.get("seed", 0))
        self.fd = os.open(cfg["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.stop = False
        self.conn = None      # resp.Conn
        self.epoch = 0        # connections that answered LEADER
        self.rev = None       # the revision of the last answer

    def log(self, ev, **kw):
        kw["t"] = kw.get("t") or time.monotonic()
        kw["o"] = self.id
        kw["ev"] = ev
        os.write(self.fd, (json.dumps(kw, separators=(",", ":")) + "\n").encode())

    def connect(self):
        """A connection, and LEADER on it: a new epoch. False (logged) if it
        could not be done."""
        timeout = self.cfg["io_timeout"]
        try:
            c = resp.Conn(self.cfg["daemon_port"])
            if self.cfg["kind"] == "raw3":
                r = c.cmd("HELLO", "3", timeout=timeout)
                if not isinstance(r, dict):
                    c.close()
                    raise OSError("HELLO 3 answered %r" % (r,))
            sent = time.monotonic()
            r = c.cmd("LEADER", self.key, timeout=timeout)
        except Exception as e:  # refused while a daemon restarts, a timeout, ...
            self.log("connect_fail", err=repr(e)[:200])
            return False
        st = state_of(r)
        if st is None:
            c.close()
            if isinstance(r, resp.Err) and r.startswith("BACKEND"):
                # a remote backend its daemon cannot read now (a fault)
                self.log("backend", n=self.epoch, cmd="LEADER", err=str(r)[:200])
            else:
                self.log("bad", n=self.epoch, cmd="LEADER", value=repr(r)[:200])
            return False
        self.epoch += 1
        self.conn = c
        self.rev = st["rev"]
        self.log("epoch", n=self.epoch, sent=sent, **st)
        return True

    def hangup(self):
        c, self.conn = self.conn, None
        if c is not None:
            c.close()

    def step(self):
        """One OBSERVE AFTER the last revision; raises resp.Closed or
        resp.Timeout when the connection is lost."""
        wait = int(self.rng.uniform(*self.cfg["wait"]))
        sent = time.monotonic()
        r = self.conn.cmd("OBSERVE", self.key, "AFTER", self.rev, "WAIT", wait,
                          timeout=self.cfg["io_timeout"])
        if r is None:
            self.log("none", n=self.epoch, sent=sent, after=self.rev)
            return
        st = state_of(r)
        if st is None:
            # out of step with the daemon: begin again
            if isinstance(r, resp.Err) and r.startswith("BACKEND"):
                self.log("backend", n=self.epoch, cmd="OBSERVE", err=str(r)[:200])
            else:
                self.log("bad", n=self.epoch, cmd="OBSERVE", value=repr(r)[:200])
            self.hangup()
            return
        self.log("state", n=self.epoch, sent=sent, after=self.rev, **st)
        self.rev = st["rev"]

    def run(self):
        self.log("start", pid=os.getpid(), client=self.cfg["kind"], daemon=self.cfg["daemon"],
                 key=self.key)
        while not self.stop:
            if self.conn is None and not self.connect():
                time.sleep(self.rng.uniform(0.02, 0.06))
                continue
            try:
                self.step()
            except (resp.Closed, resp.Timeout) as e:
                self.log("conn_lost", n=self.epoch, err=repr(e)[:200])
                self.hangup()
        self.hangup()
        self.log("exit")


if __name__ == "__main__":
    worker.main(Observer)
