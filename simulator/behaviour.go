package simulator

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"
)

// behaviours are the switches a model name turns on (see the package documentation).
type behaviours struct {
	failStatus  int // 0: off
	rateLimit   bool
	slowHeaders time.Duration
	drip        time.Duration
	stall       bool
	cut         bool
	inbandError bool
	toolCall    bool

	// Broken upstreams (broken.go).
	html200        bool
	redirect       bool
	badJSON        bool
	hugeJSON       bool
	reset          bool
	accountHeaders bool
	noSubops       int // 404 or 405 on the side endpoints; 0: off

	// Stream framing (write.go) and usage (each shape's file).
	hugeFirstEvent bool
	hugeEvent      bool
	noTerminator   bool
	tailAtOnce     bool
	comments       bool
	usageDelay     time.Duration
	noUsage        bool

	// Faults for retries, failover and stream ends (faults.go).
	retryAfter     time.Duration // 0: rate-limit's default
	noRetryAfter   bool
	silent         bool
	slowFirstEvent time.Duration
	malformedEvent bool
	noDone         bool
	contextLength  bool
	contentPolicy  bool
}

// flags are the behaviours that a bare token turns on.
var flags = map[string]func(b *behaviours){
	"rate-limit":       func(b *behaviours) { b.rateLimit = true },
	"stall":            func(b *behaviours) { b.stall = true },
	"cut":              func(b *behaviours) { b.cut = true },
	"inband-error":     func(b *behaviours) { b.inbandError = true },
	"tool-call":        func(b *behaviours) { b.toolCall = true },
	"html-200":         func(b *behaviours) { b.html200 = true },
	"redirect-302":     func(b *behaviours) { b.redirect = true },
	"bad-json":         func(b *behaviours) { b.badJSON = true },
	"huge-json":        func(b *behaviours) { b.hugeJSON = true },
	"reset":            func(b *behaviours) { b.reset = true },
	"account-headers":  func(b *behaviours) { b.accountHeaders = true },
	"no-subops":        func(b *behaviours) { b.noSubops = 404 },
	"no-subops-405":    func(b *behaviours) { b.noSubops = 405 },
	"huge-first-event": func(b *behaviours) { b.hugeFirstEvent = true },
	"huge-event":       func(b *behaviours) { b.hugeEvent = true },
	"no-terminator":    func(b *behaviours) { b.noTerminator = true },
	"tail-at-once":     func(b *behaviours) { b.tailAtOnce = true },
	"comments":         func(b *behaviours) { b.comments = true },
	"no-usage":         func(b *behaviours) { b.noUsage = true },
	"no-retry-after":   func(b *behaviours) { b.noRetryAfter = true },
	"silent":           func(b *behaviours) { b.silent = true },
	"malformed-event":  func(b *behaviours) { b.malformedEvent = true },
	"no-done":          func(b *behaviours) { b.noDone = true },
	"context-length":   func(b *behaviours) { b.contextLength = true },
	"content-policy":   func(b *behaviours) { b.contentPolicy = true },
}

func parseBehaviours(model string) behaviours { return parseParts(strings.Split(model, "+")) }

// parseParts turns the tokens among parts on; other parts are ignored.
func parseParts(parts []string) behaviours {
	var b behaviours
	for _, part := range parts {
		if set, ok := flags[part]; ok {
			set(&b)
			continue
		}
		if code, ok := strings.CutPrefix(part, "fail-"); ok {
			if n, err := strconv.Atoi(code); err == nil && len(code) == 3 && n >= 400 && n <= 599 {
				b.failStatus = n
			}
		} else if d, ok := durationAfter(part, "slow-headers-"); ok {
			b.slowHeaders = d
		} else if d, ok := durationAfter(part, "drip-"); ok {
			b.drip = d
		} else if d, ok := durationAfter(part, "usage-delay-"); ok {
			b.usageDelay = d
		} else if d, ok := durationAfter(part, "retry-after-"); ok {
			b.retryAfter = d
		} else if d, ok := durationAfter(part, "slow-first-event-"); ok {
			b.slowFirstEvent = d
		}
	}
	return b
}

// durationAfter parses the positive Go duration that follows prefix in part.
func durationAfter(part, prefix string) (time.Duration, bool) {
	rest, ok := strings.CutPrefix(part, prefix)
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(rest)
	return d, err == nil && d > 0
}

// waitHeaders applies slow-headers, and slow-first-event to an answer that is not a stream;
// false means the client went away meanwhile.
func (b behaviours) waitHeaders(ctx context.Context, streaming bool) bool {
	if !streaming && !sleep(ctx, b.slowFirstEvent) {
		return false
	}
	return sleep(ctx, b.slowHeaders)
}

// sleep waits d, or less if ctx ends first; it reports whether the full wait elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// toolCall is the call a tool-call generation answers with.
type toolCall struct {
	name string
	args string // JSON object text
}

func newToolCall(name string) *toolCall {
	args := "{}"
	if name == "exec_command" {
		args = `{"cmd":"echo simulated-tool"}`
	}
	return &toolCall{name: name, args: args}
}

func (t *toolCall) outputTokens() int { return tokens(len(t.name) + len(t.args)) }

// pickToolCall applies the tool-call behaviour: a call of the first tool that name finds,
// unless endsWithResult says the conversation already ends with a tool result.
func (c *call) pickToolCall(tools gjson.Result, name func(tool gjson.Result) string, endsWithResult bool) *toolCall {
	if !c.beh.toolCall || endsWithResult {
		return nil
	}
	for _, tool := range tools.Array() {
		if n := name(tool); n != "" {
			return newToolCall(n)
		}
	}
	return nil
}

// lastTurn is the last element of a message/item array, skipping system and developer turns.
func lastTurn(turns gjson.Result) gjson.Result {
	arr := turns.Array()
	for i := len(arr) - 1; i >= 0; i-- {
		if role := arr[i].Get("role").String(); role != "system" && role != "developer" {
			return arr[i]
		}
	}
	return gjson.Result{}
}
