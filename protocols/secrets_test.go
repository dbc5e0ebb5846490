package protocols

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// The finder answers exactly what a plain search for every secret answers.
func TestSecretFinderFindsWhatAPlainSearchFinds(t *testing.T) {
	secretSets := [][]string{
		{"127.0.0.1:34567", "127.0.0.1", "sk-upstream-credential-000", "user-bench0000", "proj_bench0000"},
		{"api.example.com", "api.example.com", "ab", "xy", "key-XYZ"},
		{"aaa", "aaaa", "zzz"},
		{"\"\"\"", "::::", "0.0"},
		{},
	}
	alphabet := []byte(`abc.0123:"{}-_XYZ ` + "\n")
	rng := rand.New(rand.NewPCG(1, 2))
	for _, secrets := range secretSets {
		f := newSecretFinder(secrets)
		for n := 0; n < 20000; n++ {
			b := make([]byte, rng.IntN(80))
			for i := range b {
				b[i] = alphabet[rng.IntN(len(alphabet))]
			}
			if len(secrets) > 0 && rng.IntN(4) == 0 {
				// Plant one secret at a random place, sometimes cut off at the end.
				s := secrets[rng.IntN(len(secrets))]
				at := rng.IntN(len(b) + 1)
				b = append(b[:at], append([]byte(s), b[at:]...)...)
				if rng.IntN(3) == 0 {
					b = b[:len(b)-rng.IntN(min(len(b), 3)+1)]
				}
			}
			want := false
			for _, s := range secrets {
				if len(s) >= 3 && bytes.Contains(b, []byte(s)) {
					want = true
				}
			}
			if got := f.in(b); got != want {
				t.Fatalf("secrets %q in %q: finder says %v, a plain search %v", secrets, b, got, want)
			}
		}
	}
}
