package protocols

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// streamDatas returns the data of every event of the recorded streams: the tests' own and
// the ones make bench sends.
func streamDatas(t testing.TB) [][][]byte {
	var files []string
	for _, dir := range []string{"testdata", filepath.Join("..", "bench", "testdata")} {
		names, _ := filepath.Glob(filepath.Join(dir, "*.sse"))
		files = append(files, names...)
	}
	if len(files) < 6 {
		t.Fatalf("recorded streams not found: %v", files)
	}
	var streams [][][]byte
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		s := NewEventStream(KindChat, "svc", false, Scrubber{})
		s.Push(b)
		var datas [][]byte
		for ev, ok := s.Next(); ok; ev, ok = s.Next() {
			if len(ev.Data) > 0 && string(ev.Data) != "[DONE]" {
				datas = append(datas, ev.Data)
			}
		}
		streams = append(streams, datas)
	}
	// Events nested past what a kept place holds (64 levels), with objects and arrays
	// mixed about that depth, and keys with escapes.
	deep := func(levels int) []byte {
		b := []byte(`{"k\u0041":`)
		for i := 1; i < levels; i++ {
			if i%4 == 0 {
				b = append(b, `{"x":`...)
			} else {
				b = append(b, '[')
			}
		}
		b = append(b, `"v"`...)
		for i := levels - 1; i > 0; i-- {
			if i%4 == 0 {
				b = append(b, '}')
			} else {
				b = append(b, ']')
			}
		}
		return append(b, `,"n":1}`...)
	}
	streams = append(streams, [][]byte{deep(63), deep(64), deep(65), deep(66), deep(66), deep(70), deep(65)})
	return streams
}

// eventHeads are ways an event's data line is written, with its data at different places.
var eventHeads = []string{"data: ", "event: x\ndata: ", "data:", "event: y\ndata: "}

// dataEvent is an event that carries data, as an upstream writes it, after head.
func dataEvent(head string, data []byte) Event {
	raw := append(append([]byte(head), data...), "\n\n"...)
	return Event{Raw: raw, Data: raw[len(head) : len(head)+len(data)], dataAt: len(head)}
}

// checkAgainstScanner runs data through the stream's object check and fails when its
// verdict is not the strict scanner's.
func checkAgainstScanner(t *testing.T, s *EventStream, data []byte) {
	t.Helper()
	checkAfter(t, s, eventHeads[0], data)
}

// checkAfter is checkAgainstScanner with data written after head.
func checkAfter(t *testing.T, s *EventStream, head string, data []byte) {
	t.Helper()
	ev := dataEvent(head, data)
	got := s.dataIsObject(ev, true, commonPrefix(ev.Raw, s.head)) // as AppendRewritten asks
	want := ValidJSONObject(data)
	if got != want {
		t.Fatalf("the stream's check says %v, the scanner %v, for %q after %q", got, want, data, s.head)
	}
}

// checkAgainstStandard fails when the scanner's verdict on data is not encoding/json's,
// for data too short to pass the scanner's depth bound.
func checkAgainstStandard(t *testing.T, data []byte) {
	t.Helper()
	// encoding/json lets invalid UTF-8 through (it reads it as U+FFFD); the scanner does
	// not.
	std := json.Valid(data) && utf8.Valid(data) && data[skipSpace(data, 0)] == '{'
	if want := ValidJSONObject(data); std != want && len(data) < MaxNesting {
		t.Fatalf("the scanner says %v, encoding/json %v, for %q", want, std, data)
	}
}

// The check that an event is one JSON object resumes where the last event's bytes stop
// being the same: its verdict must be the strict scanner's for every event, whatever came
// before. Each recorded event is taken after its predecessor, then broken at every place
// among its first bytes (where it shares them with the predecessor) in ways that turn a
// valid object invalid or the other way round, each followed by the event whole again,
// then cut there.
func TestEventObjectCheckIsTheScanners(t *testing.T) {
	breakers := []byte{'"', '\\', '{', '}', '[', ']', ',', ':', '0', 'x', 0x01, 0xc3}
	cases := 0
	for _, datas := range streamDatas(t) {
		s := NewEventStream(KindChat, "svc", false, Scrubber{})
		for _, data := range datas {
			checkAgainstStandard(t, data)
			checkAgainstScanner(t, s, data)
			for k := 0; k < min(len(data), 256); k++ {
				broken := append([]byte(nil), data...)
				for _, c := range breakers {
					if broken[k] == c {
						continue
					}
					broken[k] = c
					checkAgainstScanner(t, s, broken)
					checkAgainstScanner(t, s, data)
					cases++
				}
				checkAgainstScanner(t, s, data[:k])
				checkAgainstScanner(t, s, data)
				// The same data after another event line: the same check from another place.
				checkAfter(t, s, eventHeads[k%len(eventHeads)], data[:k])
				checkAfter(t, s, eventHeads[k%len(eventHeads)], data)
			}
		}
	}
	t.Logf("%d broken events checked", cases)
}

// FuzzEventObjectCheck holds the resumed object check to the strict scanner's verdict
// over events that share beginnings with the ones before them.
func FuzzEventObjectCheck(f *testing.F) {
	for _, datas := range streamDatas(f) {
		for i := 1; i < len(datas); i++ {
			f.Add(datas[i-1], datas[i], uint16(len(datas[i])/2))
		}
	}
	f.Add([]byte(`{"a":[1,{"b":"c\u00e9"}],"d":null}`), []byte(`{"a":[1,{"b":"c\u00e`), uint16(12))
	f.Fuzz(func(t *testing.T, prev, next []byte, cut uint16) {
		at := int(cut) % (len(prev) + 1)
		joined := append(append([]byte(nil), prev[:at]...), next...)
		s := NewEventStream(KindChat, "svc", false, Scrubber{})
		for i, data := range [][]byte{prev, next, prev, joined, prev, joined, next} {
			checkAfter(t, s, eventHeads[(int(cut)+i/2)%len(eventHeads)], data)
		}
		checkAgainstStandard(t, joined)
	})
}

// The check resumes only for bytes the last event had at the same place: an event that
// repeats bytes the last one had elsewhere is read from its start. Here the last event
// had, after the bytes it shared with the one before, just the start of the next one.
func TestEventObjectCheckComparesWithTheLastEventAsItWas(t *testing.T) {
	prefix := `{"a":"` + strings.Repeat("x", 40)
	before := prefix + `1"}`
	last := prefix + `2","b":"` + strings.Repeat("}", 200) + `"}`
	// Not an object, though read from inside the string the others share it would be.
	next := last[len(prefix)+6:][:len(prefix)] + `"}`
	s := NewEventStream(KindChat, "svc", false, Scrubber{})
	for _, data := range []string{before, last, next} {
		checkAgainstScanner(t, s, []byte(data))
	}
}
