package redistest

import (
	"fmt"
	"sync"
	"testing"
)

// A Cluster and a Sentinel set-up take a few seconds to form: the tests of a package
// share one of each (SharedCluster, SharedSentinel), each test under a key prefix of its
// own. The first test that asks starts it; the package's TestMain stops them after m.Run
// with StopShared.

var shared struct {
	mu       sync.Mutex
	owner    *mainTB
	cluster  *Cluster
	sentinel *Sentinel
	failed   map[string]string // kind → why it could not start
}

// SharedCluster is the package's Cluster (see above). A test that changes it (a
// failover, a killed node) must leave it healthy, or start a Cluster of its own.
func SharedCluster(t testing.TB) *Cluster {
	t.Helper()
	v := sharedStart(t, "cluster", func(m *mainTB) any { return StartCluster(m) })
	return v.(*Cluster)
}

// SharedSentinel is the package's Sentinel set-up (see above).
func SharedSentinel(t testing.TB) *Sentinel {
	t.Helper()
	v := sharedStart(t, "sentinel", func(m *mainTB) any { return StartSentinel(m) })
	return v.(*Sentinel)
}

// StopShared stops what SharedCluster and SharedSentinel started.
func StopShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.owner != nil {
		shared.owner.cleanup()
	}
	shared.owner, shared.cluster, shared.sentinel = nil, nil, nil
}

func sharedStart(t testing.TB, kind string, start func(*mainTB) any) any {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if why, ok := shared.failed[kind]; ok {
		t.Fatal(why)
	}
	switch {
	case kind == "cluster" && shared.cluster != nil:
		return shared.cluster
	case kind == "sentinel" && shared.sentinel != nil:
		return shared.sentinel
	}
	if shared.owner == nil {
		shared.owner = &mainTB{}
	}
	v, skip, err := shared.owner.run(func() any { return start(shared.owner) })
	switch {
	case skip != "":
		t.Skip(skip) // not remembered: Start's rule (fail under CI) applies each time
	case err != "":
		if shared.failed == nil {
			shared.failed = make(map[string]string)
		}
		shared.failed[kind] = err
		t.Fatal(err)
	}
	if kind == "cluster" {
		shared.cluster = v.(*Cluster)
	} else {
		shared.sentinel = v.(*Sentinel)
	}
	return v
}

// mainTB is a TB outside any test: it keeps the cleanups for StopShared, and a failure
// or a skip ends the start it runs.
type mainTB struct {
	cleanups []func()
}

type mainStop struct {
	skip bool
	msg  string
}

func (m *mainTB) Helper()                      {}
func (m *mainTB) Cleanup(f func())             { m.cleanups = append(m.cleanups, f) }
func (m *mainTB) Fatal(args ...any)            { panic(mainStop{msg: fmt.Sprint(args...)}) }
func (m *mainTB) Skip(args ...any)             { panic(mainStop{skip: true, msg: fmt.Sprint(args...)}) }
func (m *mainTB) Fatalf(f string, args ...any) { panic(mainStop{msg: fmt.Sprintf(f, args...)}) }

func (m *mainTB) run(f func() any) (v any, skip, err string) {
	defer func() {
		if r := recover(); r != nil {
			s, ok := r.(mainStop)
			if !ok {
				panic(r)
			}
			if s.skip {
				skip = s.msg
			} else {
				err = s.msg
			}
		}
	}()
	return f(), "", ""
}

func (m *mainTB) cleanup() {
	for i := len(m.cleanups) - 1; i >= 0; i-- {
		m.cleanups[i]()
	}
	m.cleanups = nil
}
