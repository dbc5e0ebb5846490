package main

import (
	"os"
	"testing"
)

func TestSyscallCountsReadProcIO(t *testing.T) {
	r, w, err := parseSyscallCounts([]byte("rchar: 100\nwchar: 50\nsyscr: 7\nsyscw: 3\nread_bytes: 0\n"))
	if err != nil || r != 7 || w != 3 {
		t.Fatalf("got %d reads, %d writes, %v; want 7, 3", r, w, err)
	}
	for _, bad := range []string{"syscr: 7\n", "syscr: x\nsyscw: 3\n", ""} {
		if _, _, err := parseSyscallCounts([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// The counts are the process's own: a write made between two readings is counted.
func TestSyscallCountsCountThisProcesssWrites(t *testing.T) {
	before, ok := syscallCounts(os.Getpid())
	if !ok {
		t.Skip("no /proc/<pid>/io here")
	}
	f, err := os.CreateTemp(t.TempDir(), "w")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for range 5 {
		if _, err := f.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	after, ok := syscallCounts(os.Getpid())
	if !ok {
		t.Fatal("/proc/<pid>/io unreadable the second time")
	}
	if after.writes-before.writes < 5 {
		t.Fatalf("%d writes counted for 5 made", after.writes-before.writes)
	}
}
