package redistest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// MasterName is the name the Sentinels of StartSentinel watch their master under.
const MasterName = "switchyard"

// MasterPassword is the password of StartSentinel's master and replica (the Sentinels
// have none of their own): the URLs carry it, as a gateway's configuration would.
const MasterPassword = "sentinel-test-pw"

// Sentinel is a master, one replica and three Sentinels (redis-server --sentinel, quorum
// two) watching them.
type Sentinel struct {
	Master, Replica *Server
	Sentinels       []*Server
	clients         map[*Server]*redis.SentinelClient
}

// StartSentinel starts a master, its replica and three Sentinels for the test, stopped
// and removed when it ends, and returns once the replica is in sync and every Sentinel
// knows the replica and the two other Sentinels. It skips or fails as Start does.
func StartSentinel(t TB) *Sentinel {
	t.Helper()
	// Replicas sync at once, not after the default five seconds' wait.
	nodelay := []string{"--repl-diskless-sync-delay", "0", "--requirepass", MasterPassword, "--masterauth", MasterPassword}
	s := &Sentinel{Master: launch(t, nodelay, nil)}
	s.Replica = launch(t, append(nodelay, "--replicaof", "127.0.0.1", fmt.Sprint(s.Master.port)), nil)
	s.Master.password, s.Replica.password = MasterPassword, MasterPassword
	monitor := s.Master.port
	for range 3 {
		s.Sentinels = append(s.Sentinels, launch(t, nil, func(port int) string {
			return fmt.Sprintf("port %d\nbind 127.0.0.1\n"+
				"sentinel monitor %[2]s 127.0.0.1 %[3]d 2\n"+
				"sentinel down-after-milliseconds %[2]s 1000\n"+
				"sentinel failover-timeout %[2]s 5000\n"+
				"sentinel auth-pass %[2]s %[4]s\n", port, MasterName, monitor, MasterPassword)
		}))
	}
	ctx := context.Background()
	s.WaitInSync(t)
	waitFor(t, "every Sentinel knowing the replica and the others", func() bool {
		for _, sn := range s.Sentinels {
			sc := s.sentinelClient(t, sn)
			reps, err := sc.Replicas(ctx, MasterName).Result()
			if err != nil || len(reps) != 1 || strings.Contains(reps[0]["flags"], "down") {
				return false
			}
			peers, err := sc.Sentinels(ctx, MasterName).Result()
			if err != nil || len(peers) != 2 {
				return false
			}
		}
		return true
	})
	return s
}

// WaitInSync returns once the replica has everything the master took: what was written
// before is then safe from the master's crash.
func (s *Sentinel) WaitInSync(t TB) {
	t.Helper()
	waitFor(t, "the replica in sync", func() bool {
		info, err := nodeClient(t, s.Master).Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:1") && replicasInSync(info)
	})
}

// Addrs are the Sentinels' host:port.
func (s *Sentinel) Addrs() []string {
	out := make([]string, len(s.Sentinels))
	for i, n := range s.Sentinels {
		out[i] = n.Addr()
	}
	return out
}

// URLs are the Sentinels' addresses as redis:// URLs carrying the master's password, as
// a gateway's redis_sentinel takes them.
func (s *Sentinel) URLs() []string {
	out := make([]string, len(s.Sentinels))
	for i, n := range s.Sentinels {
		out[i] = "redis://:" + MasterPassword + "@" + n.Addr()
	}
	return out
}

// Failover has a Sentinel promote the replica (SENTINEL FAILOVER) and returns once every
// Sentinel names it as the master and it answers as one; Master and Replica swap.
func (s *Sentinel) Failover(t TB) {
	t.Helper()
	ctx := context.Background()
	if err := s.sentinelClient(t, s.Sentinels[0]).Failover(ctx, MasterName).Err(); err != nil {
		t.Fatalf("redis sentinel: %v", err)
	}
	s.waitPromoted(t)
}

// Kill stops the master at once (SIGKILL), as a crash. The Sentinels are first told to
// wait ten minutes before they judge a master down, so that the replica takes over only
// at WaitPromoted, and a test sees the outage for as long as it needs.
func (s *Sentinel) Kill(t TB) {
	t.Helper()
	s.setDownAfter(t, "600000")
	s.Master.stop()
}

// WaitPromoted lets the Sentinels judge the killed master down (after a second, as at
// the start) and returns once they have promoted its replica, as Failover does; Master
// and Replica swap.
func (s *Sentinel) WaitPromoted(t TB) {
	t.Helper()
	s.setDownAfter(t, "1000")
	s.waitPromoted(t)
}

func (s *Sentinel) setDownAfter(t TB, ms string) {
	t.Helper()
	for _, sn := range s.Sentinels {
		if err := s.sentinelClient(t, sn).Set(context.Background(), MasterName, "down-after-milliseconds", ms).Err(); err != nil {
			t.Fatalf("redis sentinel: %v", err)
		}
	}
}

// waitPromoted returns once the replica answers as a master and every Sentinel names it;
// Master and Replica swap.
func (s *Sentinel) waitPromoted(t TB) {
	t.Helper()
	ctx := context.Background()
	promoted := s.Replica
	waitFor(t, "the replica promoted and named master by every Sentinel", func() bool {
		info, err := nodeClient(t, promoted).Info(ctx, "replication").Result()
		if err != nil || !strings.Contains(info, "role:master") {
			return false
		}
		for _, sn := range s.Sentinels {
			addr, err := s.sentinelClient(t, sn).GetMasterAddrByName(ctx, MasterName).Result()
			if err != nil || len(addr) != 2 || addr[0]+":"+addr[1] != promoted.Addr() {
				return false
			}
		}
		return true
	})
	// The old master is turned into the new one's replica by a Sentinel later (within
	// ten seconds); meanwhile the new master has none.
	s.Master, s.Replica = promoted, s.Master
}

func (s *Sentinel) sentinelClient(t TB, n *Server) *redis.SentinelClient {
	t.Helper()
	if c := s.clients[n]; c != nil {
		return c
	}
	c := redis.NewSentinelClient(&redis.Options{Addr: n.Addr(), DialTimeout: time.Second, ReadTimeout: 2 * time.Second, Protocol: 2})
	if s.clients == nil {
		s.clients = make(map[*Server]*redis.SentinelClient)
		// Closed with the set-up: the Sentinels' own cleanups ran before this one.
		t.Cleanup(func() {
			for _, c := range s.clients {
				_ = c.Close()
			}
		})
	}
	s.clients[n] = c
	return c
}
