package redistest

import (
	"context"
	"crypto/x509"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// NodeTimeout is the Cluster's cluster-node-timeout: how long a master may be silent
// before its replica is promoted in its place. Small, so that a test can wait it out.
const NodeTimeout = 1500 * time.Millisecond

// Cluster is a Redis Cluster of three masters, each with one replica: six redis-servers
// in cluster mode on free 127.0.0.1 ports, formed from Go (CLUSTER MEET, ADDSLOTSRANGE,
// REPLICATE). Node i (0 to 2) starts as the master of a third of the slots, node i+3 as
// its replica.
type Cluster struct {
	Nodes []*Server
	ids   []string
	// For a cluster from StartSecureCluster: the user and password its URLs carry, and
	// the CA that signed its nodes' certificate (nil: plaintext, no password).
	User, Password string
	RootCAs        *x509.CertPool
	CAFile         string // RootCAs' certificate, PEM
}

// StartCluster starts a Cluster for the test, stopped and removed when it ends, and
// returns once every node reports cluster_state:ok and every replica is in sync. It
// skips or fails as Start does.
func StartCluster(t TB) *Cluster {
	t.Helper()
	return startCluster(t, nil)
}

// SecureUser and SecurePassword are the ACL user StartSecureCluster's clients log in as.
const (
	SecureUser     = "gateway"
	SecurePassword = "cluster-test-pw"
)

// StartSecureCluster starts a Cluster as a managed service offers one: TLS only (client
// connections, the cluster bus and replication), with a certificate for 127.0.0.1 from a
// CA of the test's own (RootCAs), and an ACL user with a password (SecureUser,
// SecurePassword; the default user off). Its URLs are rediss://user:password@....
func StartSecureCluster(t TB) *Cluster {
	t.Helper()
	return startCluster(t, newTestCA(t))
}

func startCluster(t TB, ca *testCA) *Cluster {
	t.Helper()
	c := &Cluster{}
	args := []string{
		"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", strconv.Itoa(int(NodeTimeout / time.Millisecond)),
		// A replica may always take over, however long its master was away.
		"--cluster-replica-validity-factor", "0",
		// A replica syncs at once, not after the default five seconds' wait.
		"--repl-diskless-sync-delay", "0",
	}
	if ca != nil {
		c.User, c.Password, c.RootCAs, c.CAFile = SecureUser, SecurePassword, ca.pool, ca.caFile
		args = append(args, "--user", "default", "off",
			"--user", SecureUser, "on", ">"+SecurePassword, "~*", "&*", "+@all",
			"--masteruser", SecureUser, "--masterauth", SecurePassword)
	}
	for range 6 {
		c.Nodes = append(c.Nodes, launchWith(t, args, ca, c.User, c.Password))
	}
	ctx := context.Background()
	for _, n := range c.Nodes {
		id, err := c.client(t, n).Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatalf("redis cluster: %v", err)
		}
		c.ids = append(c.ids, id)
	}
	for _, n := range c.Nodes[1:] {
		c.do(t, n, "CLUSTER", "MEET", "127.0.0.1", n0port(c))
	}
	const slots = 16384
	for i := range 3 {
		lo, hi := i*slots/3, (i+1)*slots/3-1
		c.do(t, c.Nodes[i], "CLUSTER", "ADDSLOTSRANGE", lo, hi)
	}
	// A replica can follow its master only once it knows it.
	c.wait(t, "every node knows the six", func() bool {
		for _, n := range c.Nodes {
			s, err := c.client(t, n).ClusterNodes(ctx).Result()
			if err != nil || strings.Count(strings.TrimSpace(s), "\n")+1 != 6 {
				return false
			}
		}
		return true
	})
	for i := range 3 {
		c.do(t, c.Nodes[i+3], "CLUSTER", "REPLICATE", c.ids[i])
	}
	c.WaitHealthy(t)
	return c
}

func n0port(c *Cluster) string { return strconv.Itoa(c.Nodes[0].port) }

// Addrs are the nodes' host:port.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr()
	}
	return out
}

// URLs are the nodes' addresses as redis:// URLs (rediss://user:password@ for a secure
// cluster).
func (c *Cluster) URLs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		if c.RootCAs != nil {
			out[i] = "rediss://" + c.User + ":" + c.Password + "@" + n.Addr()
		} else {
			out[i] = "redis://" + n.Addr()
		}
	}
	return out
}

// WaitHealthy returns once every running node reports cluster_state:ok, every slot is
// served by a running master, and each running master's replicas (those running) are
// online and caught up with it.
func (c *Cluster) WaitHealthy(t TB) {
	t.Helper()
	ctx := context.Background()
	c.wait(t, "cluster_state:ok and replicas in sync", func() bool {
		for _, n := range c.running() {
			info, err := c.client(t, n).ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") {
				return false
			}
		}
		masters := 0
		for _, n := range c.running() {
			info, err := c.client(t, n).Info(ctx, "replication").Result()
			if err != nil {
				return false
			}
			if !strings.Contains(info, "role:master") {
				continue
			}
			masters++
			if !replicasInSync(info) {
				return false
			}
		}
		return masters == 3
	})
}

// replicasInSync reports whether every replica an INFO replication section lists is
// online at the master's offset.
func replicasInSync(info string) bool {
	var offset string
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "master_repl_offset:"); ok {
			offset = v
		}
	}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "slave") || !strings.Contains(line, "ip=") {
			continue
		}
		if !strings.Contains(line, "state=online") || !strings.Contains(line, "offset="+offset+",") {
			return false
		}
	}
	return true
}

// MasterOf is the node that serves key's slot now.
func (c *Cluster) MasterOf(t TB, key string) *Server {
	t.Helper()
	ctx := context.Background()
	cl := c.client(t, c.running()[0])
	slot, err := cl.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatalf("redis cluster: %v", err)
	}
	slots, err := cl.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatalf("redis cluster: %v", err)
	}
	for _, r := range slots {
		if int64(r.Start) <= slot && slot <= int64(r.End) && len(r.Nodes) > 0 {
			_, port, _ := strings.Cut(r.Nodes[0].Addr, ":")
			p, _ := strconv.Atoi(port)
			return c.byPort(t, p)
		}
	}
	t.Fatalf("redis cluster: no master serves the slot of %q", key)
	return nil
}

// ReplicaOf is a running replica of master.
func (c *Cluster) ReplicaOf(t TB, master *Server) *Server {
	t.Helper()
	info, err := c.client(t, master).Info(context.Background(), "replication").Result()
	if err != nil {
		t.Fatalf("redis cluster: %v", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "slave") || !strings.Contains(line, "port=") {
			continue
		}
		for _, f := range strings.Split(strings.TrimSpace(line), ",") {
			if v, ok := strings.CutPrefix(f, "port="); ok {
				p, _ := strconv.Atoi(v)
				return c.byPort(t, p)
			}
		}
	}
	t.Fatalf("redis cluster: the master on %d has no replica", master.port)
	return nil
}

// Failover promotes master's replica in its place with CLUSTER FAILOVER (the graceful
// kind: the replica first catches up, so that no write is lost), and returns the new
// master once it serves the slots.
func (c *Cluster) Failover(t TB, master *Server) *Server {
	t.Helper()
	replica := c.ReplicaOf(t, master)
	ctx := context.Background()
	// A manual failover needs a replica in sync: right after another failover the old
	// master, now a replica, may still be loading its first copy, and the failover would
	// time out unheard.
	c.wait(t, "the replica in sync with its master", func() bool {
		info, err := c.client(t, replica).Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up") && !strings.Contains(info, "master_sync_in_progress:1")
	})
	c.do(t, replica, "CLUSTER", "FAILOVER")
	c.wait(t, "the replica promoted, its master turned replica", func() bool {
		info, err := c.client(t, replica).Info(ctx, "replication").Result()
		if err != nil || !strings.Contains(info, "role:master") {
			return false
		}
		info, err = c.client(t, master).Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "role:slave")
	})
	c.waitStateOK(t)
	return replica
}

// Kill stops master at once (SIGKILL), as a crash, and returns its replica. The replica
// is held back from taking over (cluster-replica-no-failover) until WaitPromoted, so
// that a test sees the outage for as long as it needs.
func (c *Cluster) Kill(t TB, master *Server) *Server {
	t.Helper()
	replica := c.ReplicaOf(t, master)
	c.do(t, replica, "CONFIG", "SET", "cluster-replica-no-failover", "yes")
	master.stop()
	return replica
}

// WaitPromoted lets replica take its killed master's place, which it does once the
// master has been silent for NodeTimeout, and returns once it answers as a master and
// every running node reports cluster_state:ok.
func (c *Cluster) WaitPromoted(t TB, replica *Server) {
	t.Helper()
	c.do(t, replica, "CONFIG", "SET", "cluster-replica-no-failover", "no")
	c.wait(t, "the replica promoted in place of the killed master", func() bool {
		info, err := c.client(t, replica).Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, "role:master")
	})
	c.waitStateOK(t)
}

// waitStateOK returns once every running node reports cluster_state:ok with every slot
// served. (Unlike WaitHealthy it does not wait for replicas to catch up, which they do
// not while writes keep coming.)
func (c *Cluster) waitStateOK(t TB) {
	t.Helper()
	ctx := context.Background()
	c.wait(t, "cluster_state:ok", func() bool {
		for _, n := range c.running() {
			info, err := c.client(t, n).ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") {
				return false
			}
		}
		return true
	})
}

func (c *Cluster) running() []*Server {
	var out []*Server
	for _, n := range c.Nodes {
		n.mu.Lock()
		up := n.cmd != nil
		n.mu.Unlock()
		if up {
			out = append(out, n)
		}
	}
	return out
}

func (c *Cluster) byPort(t TB, port int) *Server {
	t.Helper()
	for _, n := range c.Nodes {
		if n.port == port {
			return n
		}
	}
	t.Fatalf("redis cluster: no node on port %d", port)
	return nil
}

// client is a plain connection to one node (not a cluster client), closed with the test.
func (c *Cluster) client(t TB, n *Server) *redis.Client {
	return nodeClient(t, n)
}

func (c *Cluster) do(t TB, n *Server, args ...any) {
	t.Helper()
	if err := c.client(t, n).Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("redis cluster: %v: %v", args, err)
	}
}

func (c *Cluster) wait(t TB, what string, ok func() bool) {
	t.Helper()
	waitFor(t, what, ok)
}

// waitFor polls ok every 20ms for up to 20s.
func waitFor(t TB, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("redis: waited 20s for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// nodeClient is a client of one server, kept while it runs (closed when it stops).
func nodeClient(_ TB, n *Server) *redis.Client {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.admin == nil {
		n.admin = redis.NewClient(&redis.Options{Addr: n.Addr(), Username: n.user, Password: n.password, TLSConfig: n.tls, DialTimeout: time.Second,
			ReadTimeout: 2 * time.Second, MaxRetries: -1, Protocol: 2})
	}
	return n.admin
}
