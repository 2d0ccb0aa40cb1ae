// The reference beside dlockd's etcd election: etcd's own Election recipe
// (clientv3/concurrency, as Debian's golang-etcd-server-dev ships it) on the
// same etcd, for bench/elect.py.
//
//	election -endpoint HOST:PORT -prefix P -rounds N close
//	    N times: a leader and a standby (each with a client and session of
//	    its own, the default session TTL) campaign on P; once the standby's
//	    key is in etcd the leader's session is closed (its lease revoked):
//	    the time until the standby's Campaign returns
//	election -endpoint HOST:PORT -prefix P -rounds N resign
//	    the same, the leader calling Resign (its key deleted, its session
//	    kept) instead
//	election -endpoint HOST:PORT -prefix P -rounds N kill
//	    N times: the leader is a child process (this program, "lead"); once
//	    the standby's key is in etcd the child is SIGKILLed: the time until
//	    the standby leads (the leader's session TTL runs out)
//	election -endpoint HOST:PORT -prefix P lead
//	    campaign, print "leading", then wait to be killed
//
// close, resign and kill print one JSON object: {"ttl_s": ..., "handover_s": [...]}.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"go.etcd.io/etcd/clientv3"
	"go.etcd.io/etcd/clientv3/concurrency"
)

var (
	endpoint = flag.String("endpoint", "127.0.0.1:2379", "etcd client address")
	prefix   = flag.String("prefix", "/bench-native-election", "election prefix")
	rounds   = flag.Int("rounds", 100, "handovers to time")
	// etcd sends a watch that starts at a past revision (the standby's, in
	// waitDeletes) its events only once its sync loop, every 100 ms, has
	// caught it up: a standby that has waited longer than that is what a
	// failover meets
	settle = flag.Duration("settle", 250*time.Millisecond,
		"how long the standby waits before the leader goes")

	sessionTTL int64 // s: the TTL etcd granted a session's lease
)

// A client and a session of its own: what one process of an application has.
type member struct {
	cli *clientv3.Client
	ses *concurrency.Session
	el  *concurrency.Election
}

func join(pfx string) *member {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{*endpoint},
		DialTimeout: 5 * time.Second})
	if err != nil {
		fail("connect: %v", err)
	}
	ses, err := concurrency.NewSession(cli) // the default TTL (60 s)
	if err != nil {
		fail("session: %v", err)
	}
	if ttl, err := cli.TimeToLive(context.Background(), ses.Lease()); err == nil {
		sessionTTL = ttl.GrantedTTL
	}
	return &member{cli, ses, concurrency.NewElection(ses, pfx)}
}

func (m *member) close() {
	m.ses.Close()
	m.cli.Close()
}

func fail(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "election: "+format+"\n", a...)
	os.Exit(1)
}

// waitKeys waits (5 s at most) until pfx holds n keys: the standby's
// campaign is in etcd, queued behind the leader's.
func waitKeys(cli *clientv3.Client, pfx string, n int64) {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		r, err := cli.Get(context.Background(), pfx+"/", clientv3.WithPrefix(),
			clientv3.WithCountOnly())
		if err == nil && r.Count >= n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	fail("the standby's key never showed up under %s", pfx)
}

// standby campaigns in the background; the returned channel gets the
// time it became leader.
func standby(m *member, value string) <-chan time.Time {
	done := make(chan time.Time, 1)
	go func() {
		if err := m.el.Campaign(context.Background(), value); err != nil {
			fail("campaign: %v", err)
		}
		done <- time.Now()
	}()
	return done
}

func timeClose(resign bool) []float64 {
	var out []float64
	for i := 0; i < *rounds; i++ {
		pfx := fmt.Sprintf("%s/%d", *prefix, i)
		leader, next := join(pfx), join(pfx)
		if err := leader.el.Campaign(context.Background(), "leader"); err != nil {
			fail("campaign: %v", err)
		}
		done := standby(next, "standby")
		waitKeys(leader.cli, pfx, 2)
		time.Sleep(*settle)
		t0 := time.Now()
		if resign {
			if err := leader.el.Resign(context.Background()); err != nil {
				fail("resign: %v", err)
			}
		} else {
			leader.ses.Close() // revokes the lease: what a process does as it ends
		}
		out = append(out, (<-done).Sub(t0).Seconds())
		leader.close()
		next.close()
	}
	return out
}

func timeKill() []float64 {
	var out []float64
	for i := 0; i < *rounds; i++ {
		pfx := fmt.Sprintf("%s/kill-%d", *prefix, i)
		child := exec.Command(os.Args[0], "-endpoint", *endpoint, "-prefix", pfx, "lead")
		child.Stderr = os.Stderr
		pipe, err := child.StdoutPipe()
		if err != nil {
			fail("pipe: %v", err)
		}
		if err := child.Start(); err != nil {
			fail("start: %v", err)
		}
		line, err := bufio.NewReader(pipe).ReadString('\n')
		if err != nil || line != "leading\n" {
			child.Process.Kill()
			fail("the leader said %q (%v)", line, err)
		}
		next := join(pfx)
		done := standby(next, "standby")
		waitKeys(next.cli, pfx, 2)
		time.Sleep(*settle)
		t0 := time.Now()
		child.Process.Signal(syscall.SIGKILL)
		child.Wait()
		out = append(out, (<-done).Sub(t0).Seconds())
		next.close()
	}
	return out
}

func lead() {
	m := join(*prefix)
	if err := m.el.Campaign(context.Background(), "leader"); err != nil {
		fail("campaign: %v", err)
	}
	fmt.Println("leading")
	select {}
}

func main() {
	flag.Parse()
	var xs []float64
	switch flag.Arg(0) {
	case "close":
		xs = timeClose(false)
	case "resign":
		xs = timeClose(true)
	case "kill":
		xs = timeKill()
	case "lead":
		lead()
	default:
		fail("usage: election [-endpoint A] [-prefix P] [-rounds N] close|resign|kill|lead")
	}
	json.NewEncoder(os.Stdout).Encode(map[string]interface{}{
		"ttl_s": sessionTTL, "handover_s": xs})
}
