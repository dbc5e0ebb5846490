package protocols

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseRequestRefusesWhatParsersReadDifferently(t *testing.T) {
	cases := []struct {
		name, body, param, says string
	}{
		{"stream_options twice", `{"model":"m","messages":[],"stream":true,"stream_options":{"include_usage":true},"stream_options":{"include_usage":false}}`, "stream_options", "more than once"},
		{"max_tokens twice", `{"model":"m","messages":[],"max_tokens":10,"max_tokens":100000}`, "max_tokens", "more than once"},
		{"messages twice", `{"model":"m","messages":[],"messages":[{"role":"user","content":"x"}]}`, "messages", "more than once"},
		{"an unread key twice", `{"model":"m","messages":[],"temperature":0,"temperature":2}`, "temperature", "more than once"},
		{"a key twice through an escape", `{"model":"m","messages":[],"stre\u0061m":true,"stream":false}`, "stream", "more than once"},
		{"thinking.budget_tokens twice", `{"model":"m","messages":[],"max_tokens":4096,"thinking":{"type":"enabled","budget_tokens":2048,"budget_tokens":9000}}`, "thinking.budget_tokens", "more than once"},
		{"stream_options.include_usage twice", `{"model":"m","stream_options":{"include_usage":true,"include_usage":false}}`, "stream_options.include_usage", "more than once"},
		{"reasoning.effort twice", `{"model":"m","input":"x","reasoning":{"effort":"low","effort":"high"}}`, "reasoning.effort", "more than once"},
		{"model twice in different case", `{"model":"cheap","MODEL":"expensive"}`, "MODEL", "more than once"},
		{"a read field in another case", `{"model":"m","messages":[],"Stream":true}`, "Stream", "only in case"},
		{"a read field through a folding rune", "{\"model\":\"m\",\"\u017ftream\":true}", "\u017ftream", "only in case"},
		{"invalid UTF-8 in a string", "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\xff\xfeb\"}]}", "", "not valid UTF-8"},
		{"an overlong UTF-8 encoding", "{\"model\":\"m\",\"x\":\"\xc0\xaf\"}", "", "not valid UTF-8"},
		{"a UTF-16 surrogate encoded in UTF-8", "{\"model\":\"m\",\"x\":\"\xed\xa0\x80\"}", "", "not valid UTF-8"},
		{"a raw control character in a string", "{\"model\":\"m\",\"x\":\"a\nb\"}", "", "not valid JSON"},
		{"trailing data", `{"model":"m"} {"model":"n"}`, "", "not valid JSON"},
		{"a trailing comma", `{"model":"m",}`, "", "not valid JSON"},
		{"a bad escape", `{"model":"m\x"}`, "", "not valid JSON"},
		{"a leading zero", `{"model":"m","max_tokens":0123}`, "", "not valid JSON"},
		{"nesting past the limit", `{"a":` + strings.Repeat("[", MaxNesting) + strings.Repeat("]", MaxNesting) + `}`, "", "deeper than 1000"},
		{"an array", `[{"model":"m"}]`, "", "must be a JSON object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseRequest(FamilyA, []byte(c.body))
			require.NotNil(t, err, "the gateway must refuse this body")
			assert.Equal(t, 400, err.Status)
			assert.Equal(t, c.param, err.Param)
			assert.Contains(t, err.Message, c.says)
		})
	}
}

func TestParseRequestAcceptsStrictJSON(t *testing.T) {
	for _, body := range []string{
		`{"model":"m"}`,
		` {"model":"m","messages":[]} `,
		`{"model":"m","a":{"b":{"c":[1,-2.5e+3,0.0,true,false,null,"\u00e9\ud83d\ude00\n"]}}}`,
		`{"model":"m","a":{"x":1,"x":2}}`, // duplicates deep in a field the gateway never reads are left alone
		`{"model":"m","nest":` + strings.Repeat("[", MaxNesting-1) + strings.Repeat("]", MaxNesting-1) + `}`,
		"{\"model\":\"m\",\"text\":\"caf\xc3\xa9 \xf0\x9f\x98\x80\"}",
	} {
		p, err := ParseRequest(FamilyA, []byte(body))
		require.Nil(t, err, body)
		model, err := p.Model(FamilyA)
		require.Nil(t, err)
		assert.Equal(t, "m", model)
	}
}

// A body built to exhaust a recursive parser is refused in bounded stack and memory.
func TestParseRequestSurvivesDeepNesting(t *testing.T) {
	body := append([]byte(`{"a":`), bytes.Repeat([]byte("["), 10_000_000)...)
	_, err := ParseRequest(FamilyA, body)
	require.NotNil(t, err)
	assert.Contains(t, err.Message, "deeper than 1000")

	allocs := testing.AllocsPerRun(3, func() { _, _ = ParseRequest(FamilyA, body) })
	assert.Less(t, allocs, 20.0, "refusing a deep body must not allocate per level")
}

func TestParseRequestBoundsTopLevelFields(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"model":"m"`)
	for i := range maxMembers {
		b.WriteString(`,"k`)
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteString(string(rune('a' + i%26)))
		b.WriteString(`":1`)
	}
	b.WriteString("}")
	_, err := ParseRequest(FamilyA, []byte(b.String()))
	require.NotNil(t, err)
	assert.Contains(t, err.Message, "top-level fields")
}

// readings is what a standard parser makes of the fields the gateway acts on.
type readings struct {
	Model     json.RawMessage `json:"model"`
	Stream    json.RawMessage `json:"stream"`
	MaxTokens json.RawMessage `json:"max_tokens"`
}

// standardVerdict says whether a strict reader (encoding/json plus the UTF-8, nesting and
// duplicate-key rules the gateway states) accepts body as one object.
func standardVerdict(body []byte) bool {
	if !json.Valid(body) || !utf8.Valid(body) {
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	depth, keys := 0, map[string]bool{}
	expectKey := false
	var stack []json.Delim
	for first := true; ; first = false {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return true
		}
		if err != nil || first && tok != json.Delim('{') {
			return false
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{', '[':
				if depth == 0 && d != '{' {
					return false
				}
				depth++
				stack = append(stack, d)
				if depth > MaxNesting {
					return false
				}
			default:
				depth--
				stack = stack[:len(stack)-1]
			}
			expectKey = depth == 1
			continue
		}
		if depth == 1 && stack[0] == '{' {
			if expectKey {
				k := tok.(string)
				if keys[k] {
					return false
				}
				keys[k] = true
			}
			expectKey = !expectKey
		}
	}
}

// FuzzParseRequest holds the rule that the gateway never forwards a body a standard
// parser could read differently: what it accepts, encoding/json accepts with the same
// model, stream and max_tokens; what a strict reader accepts, it accepts.
func FuzzParseRequest(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "*.json"))
	for _, s := range seeds {
		if b, err := os.ReadFile(s); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"model":"m","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`))
	f.Add([]byte(`{"model":"m","model":"n"}`))
	f.Add([]byte(`{"mod\u0065l":"m","stream_options":{"include_usage":true}}`))
	f.Add([]byte("{\"model\":\"\xff\"}"))
	f.Add([]byte(`{"a":[[[[{"b":[]}]]]],"model":"x"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		p, apiErr := ParseRequest(FamilyA, body)
		if apiErr != nil {
			if apiErr.Param == "" && standardVerdict(body) {
				t.Fatalf("refused a body a strict parser reads fine: %s", apiErr.Message)
			}
			return
		}
		var std readings
		if err := json.Unmarshal(body, &std); err != nil {
			t.Fatalf("accepted a body encoding/json refuses: %v", err)
		}
		same := func(name string, gateway string, standard json.RawMessage) {
			if gateway == "" && standard == nil {
				return
			}
			var g, s any
			if gateway != "" {
				_ = json.Unmarshal([]byte(gateway), &g)
			}
			if standard != nil {
				_ = json.Unmarshal(standard, &s)
			}
			if !assert.ObjectsAreEqual(g, s) {
				t.Fatalf("%s read as %s by the gateway and %s by encoding/json", name, gateway, standard)
			}
		}
		same("model", p.get(fieldModel).Raw, std.Model)
		same("stream", p.get(fieldStream).Raw, std.Stream)
		same("max_tokens", p.get(fieldMaxTokens).Raw, std.MaxTokens)
		if _, err := p.Model(FamilyA); err == nil {
			up, _ := p.Upstream(Operation{Family: FamilyA, Kind: KindResponses}, "upstream-x", 0)
			var out map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(up.Bytes(), &out), "the upstream body must stay valid JSON")
			assert.JSONEq(t, `"upstream-x"`, string(out["model"]))
		}
	})
}

// Keys that differ only in case are duplicates whether a body has few top-level keys
// (compared pairwise) or many (compared through a folded set).
func TestDuplicateKeysFoldCaseAtEverySize(t *testing.T) {
	for _, extra := range []int{0, 30} {
		var b strings.Builder
		b.WriteString(`{"model":"m"`)
		for i := range extra {
			b.WriteString(`,"field` + strings.Repeat("x", i) + `":1`)
		}
		for _, pair := range [][2]string{{"top_k", "TOP_K"}, {"top_k", "top_\u212a"}, {"seed", "\u017feed"}} {
			body := b.String() + `,"` + pair[0] + `":1,"` + pair[1] + `":2}`
			_, err := ParseRequest(FamilyA, []byte(body))
			require.NotNil(t, err, "%q and %q with %d other keys", pair[0], pair[1], extra)
			assert.Contains(t, err.Message, "more than once")
		}
		_, err := ParseRequest(FamilyA, []byte(b.String()+`,"top_k":1,"top_p":2}`))
		assert.Nil(t, err, "distinct keys with %d other keys", extra)
	}
}

// The word-at-a-time test passes exactly the words whose eight bytes the string scanner
// would step over one by one, and otherwise points at the first byte it would stop at.
func TestSpecialBytesFlagsTheFirstByteTheScannerStopsAt(t *testing.T) {
	plain := func(c byte) bool { return c >= 0x20 && c < 0x80 && c != '"' && c != '\\' }
	check := func(word [8]byte) {
		first := -1
		for i, c := range word {
			if !plain(c) {
				first = i
				break
			}
		}
		m := specialBytes(binary.LittleEndian.Uint64(word[:]))
		if (m == 0) != (first < 0) {
			t.Fatalf("%q: word test says %#x", word[:], m)
		}
		if m != 0 && bits.TrailingZeros64(m)>>3 != first {
			t.Fatalf("%q: lowest flag on byte %d, first special byte is %d", word[:], bits.TrailingZeros64(m)>>3, first)
		}
	}
	for pos := 0; pos < 8; pos++ {
		for c := 0; c < 256; c++ {
			for _, fill := range []byte{'a', ' ', '~', 0x1f, '"', 0x80, '!'} {
				var w [8]byte
				for i := range w {
					w[i] = fill
				}
				w[pos] = byte(c)
				check(w)
			}
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for n := 0; n < 200000; n++ {
		var w [8]byte
		for i := range w {
			w[i] = byte(rng.IntN(256))
			if rng.IntN(2) == 0 {
				w[i] = byte(0x20 + rng.IntN(0x60))
			}
		}
		check(w)
	}
}

// stringRunByteByByte is stringRun as the grammar states it, one byte at a time.
func stringRunByteByByte(b []byte, i int) (end int, escaped, closed bool) {
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			return i + 1, escaped, true
		case c == '\\':
			if i+1 >= len(b) {
				return i, escaped, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return i, escaped, false
				}
				i += 6
			default:
				return i, escaped, false
			}
			escaped = true
		case c < 0x20:
			return i, escaped, false
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size <= 1 {
				return i, escaped, false
			}
			i += size
		}
	}
	return i, escaped, false
}

// A special byte anywhere in a long plain run stops the string scanner exactly where the
// grammar says, whichever word or block it falls in and wherever the run is cut.
// Both ways of skipping plain text (AVX2 where the CPU has it, portable words elsewhere)
// never pass a special byte and never stop 32 or more bytes short of it or of the end:
// every byte value, at every position of blocks read from every alignment.
func TestPlainPrefixNeverPassesASpecialByte(t *testing.T) {
	plain := func(c byte) bool { return c >= 0x20 && c < 0x80 && c != '"' && c != '\\' }
	impls := map[string]func([]byte) int{"plainPrefix": plainPrefix, "plainPrefixWords": plainPrefixWords}
	check := func(name string, b []byte, n int) {
		first := len(b)
		for i, c := range b {
			if !plain(c) {
				first = i
				break
			}
		}
		if n < 0 || n > first || first-n >= 32 {
			t.Fatalf("%s on %d bytes, first special at %d: skipped %d", name, len(b), first, n)
		}
	}
	buf := make([]byte, 256+32)
	for name, prefix := range impls {
		for align := 0; align < 32; align += 7 {
			for length := 0; length <= 200; length += 13 {
				for pos := 0; pos < length; pos++ {
					for c := 0; c < 256; c++ {
						b := buf[align : align+length]
						for i := range b {
							b[i] = 'a' + byte(i%26)
						}
						b[pos] = byte(c)
						check(name, b, prefix(b))
					}
				}
				b := buf[align : align+length]
				check(name, b, prefix(b))
			}
		}
		rng := rand.New(rand.NewPCG(5, 6))
		for n := 0; n < 20000; n++ {
			b := buf[rng.IntN(32):][:rng.IntN(257)]
			for i := range b {
				b[i] = byte(0x20 + rng.IntN(0x60))
				if rng.IntN(200) == 0 {
					b[i] = byte(rng.IntN(256))
				}
			}
			check(name, b, prefix(b))
		}
	}
}

func TestStringRunStopsAtEverySpecialByteOfALongRun(t *testing.T) {
	specials := []string{`"`, `\n`, `\u00e9`, `\x`, "\x1f", "é", "\xff", "\xc3"}
	for _, sp := range specials {
		for pos := 0; pos < 140; pos++ {
			run := []byte(strings.Repeat("plain text ", 20)[:pos] + sp + strings.Repeat("more words ", 10) + `"`)
			for _, cut := range []int{len(run), pos + len(sp)/2, pos + 40, pos + 67} {
				if cut > len(run) {
					continue
				}
				for start := 0; start < 9 && start <= pos; start++ {
					b := run[:cut]
					e1, x1, c1 := stringRun(b, start)
					e2, x2, c2 := stringRunByteByByte(b, start)
					if e1 != e2 || x1 != x2 || c1 != c2 {
						t.Fatalf("%q at %d, cut at %d, from %d: got (%d %v %v), want (%d %v %v)", sp, pos, cut, start, e1, x1, c1, e2, x2, c2)
					}
				}
			}
		}
	}
}

// scanInPieces scans b as it would arrive cut at cuts (ascending), and records what the
// scanner reported and how far it said the body was safe after each piece.
func scanInPieces(b []byte, cuts []int) (visits []string, fault *scanFault, safes []int) {
	var s objectScanner
	visit := func(key string, start, end int) {
		visits = append(visits, fmt.Sprintf("%s@%d-%d", key, start, end))
	}
	for _, c := range cuts {
		if done, f := s.scan(b[:c], false, visit); done || f != nil && f.kind != faultTooDeep && f.kind != faultTooManyKeys {
			panic("a body that is not final must not end the scan")
		}
		safes = append(safes, s.safe)
	}
	_, fault = s.scan(b, true, visit)
	return visits, fault, safes
}

// checkPieces holds the piecewise scan of b to the whole one: the same members, the same
// verdict, and a safe length that only grows, never covers bytes not yet arrived, and never
// reaches the object's closing brace.
func checkPieces(t *testing.T, b []byte, cuts []int) {
	t.Helper()
	var want []string
	wantFault := scanObject(b, func(key string, start, end int) {
		want = append(want, fmt.Sprintf("%s@%d-%d", key, start, end))
	})
	got, gotFault, safes := scanInPieces(b, cuts)
	if !assert.Equal(t, want, got, "members of %q cut at %v", b, cuts) ||
		!assert.Equal(t, wantFault, gotFault, "verdict on %q cut at %v", b, cuts) {
		return
	}
	closing := len(b)
	if wantFault == nil {
		closing = bytes.LastIndexByte(b, '}')
	}
	last := 0
	for k, safe := range safes {
		require.GreaterOrEqual(t, safe, last, "safe went back on %q cut at %v", b, cuts)
		require.LessOrEqual(t, safe, cuts[k], "safe past the bytes arrived on %q cut at %v", b, cuts)
		require.LessOrEqual(t, safe, closing, "safe covers the closing brace of %q cut at %v", b, cuts)
		last = safe
	}
}

func randomCuts(r *rand.Rand, n int) []int {
	var cuts []int
	for at := 0; at < n; {
		at += 1 + r.IntN(1+r.IntN(n/2+1))
		if at < n {
			cuts = append(cuts, at)
		}
	}
	return cuts
}

func TestABodyReadInPiecesIsReadAsTheWhole(t *testing.T) {
	bodies := [][]byte{
		[]byte(`{"model":"m","messages":[{"role":"user","content":"h\u00e9llo \"q\" \\ ✓"}],"stream":true,"max_tokens":12.5e3}`),
		[]byte(` { "a" : [ 1 , -2.5E+3 , true , false , null , { } , [ ] , "" ] , "b\u0041" : {"x":{"y":[[]]}} }  `),
		[]byte(`{"m\u006fdel":"x","n":-0.0,"t":true}`),
		[]byte(`{"a":1}{"b":2}`), []byte(`{"a":1,}`), []byte(`{"a":tru}`), []byte(`{"a":"\ud800\u12"}`),
		[]byte("{\"a\":\"\xff\"}"), []byte("{\"a\":\"\xe2\x9c\"}"), []byte(`{"a":01}`), []byte(`{"a" 1}`),
		[]byte(`[1]`), []byte(``), []byte(`   `), []byte(`{"a":[1,2}`), []byte(`{"a":1} x`), []byte(`{"a":-}`),
		append(append([]byte(`{"a":`), bytes.Repeat([]byte("["), MaxNesting+5)...), bytes.Repeat([]byte("]"), MaxNesting+5)...),
	}
	bodies = append(bodies, chatBody(300<<10))
	r := rand.New(rand.NewPCG(7, 14))
	for _, b := range bodies {
		for n := 1; n <= len(b) && n < 64; n++ { // every single cut of the short ones
			checkPieces(t, b, []int{n})
		}
		for range 200 {
			checkPieces(t, b, randomCuts(r, len(b)))
		}
		every := make([]int, 0, len(b))
		for n := 1; n < len(b) && len(b) < 4096; n++ {
			every = append(every, n)
		}
		checkPieces(t, b, every) // a byte at a time
	}
	// The scanner keeps up: all but the unfinished number at the end is known good.
	b := chatBody(300 << 10)
	_, _, safes := scanInPieces(b, []int{len(b) / 2, len(b) - 1})
	assert.Equal(t, len(b)-len(`4096}`), safes[1])
	assert.Greater(t, safes[0], len(b)/2-200)
}

// chatBody is a valid chat request of about size bytes with text, escapes and multi-byte
// characters throughout.
func chatBody(size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"acme/chat","messages":[`)
	for i := 0; b.Len() < size; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"role":"user","content":"turn %d: \"quoted\" \\ tab\t é ✓ 🙂 %s"}`, i, strings.Repeat("word ", i%50))
	}
	b.WriteString(`],"stream":true,"stream_options":{"include_usage":false},"max_tokens":4096}`)
	return b.Bytes()
}

// FuzzScanInPieces: however a body is cut as it arrives, the scanner reads it as it
// reads the whole.
func FuzzScanInPieces(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"content":"h\u00e9 ✓"}],"n":1e5}`), uint64(3))
	f.Add([]byte(`{"a":[1,{"b":"\"x\""}],"c":nul}`), uint64(99))
	f.Fuzz(func(t *testing.T, b []byte, seed uint64) {
		checkPieces(t, b, randomCuts(rand.New(rand.NewPCG(seed, 1)), len(b)))
	})
}
