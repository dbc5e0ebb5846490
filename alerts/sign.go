package alerts

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// SignatureHeader carries a delivery's signature: "t=<unix seconds>,v1=<hex>", where
// the hex is HMAC-SHA256, keyed with the webhook's secret, of "<t>.<body>". Binding the
// time into the signature lets a receiver refuse a delivery replayed later.
const SignatureHeader = "Switchyard-Signature"

// Sign returns the SignatureHeader value for body sent at t.
func Sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Errors of Verify.
var (
	ErrBadSignature = errors.New("alerts: signature does not match")
	ErrStale        = errors.New("alerts: signature too old or from the future")
)

// Verify checks a SignatureHeader value against body, as a receiver would: the header
// must carry a time within tolerance of now and a v1 signature that matches. Several
// v1 values are accepted (one matching is enough), so a secret can be rotated.
func Verify(secret, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var ts string
	var sigs [][]byte
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			if b, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return ErrBadSignature
	}
	want := mac(secret, ts, body)
	ok := false
	for _, s := range sigs {
		ok = ok || hmac.Equal(s, want)
	}
	if !ok {
		return ErrBadSignature
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return ErrStale
	}
	return nil
}
