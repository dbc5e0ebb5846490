package simulator

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// maxScheduled bounds how many names the schedules remember; the oldest is forgotten first.
const maxScheduled = 1024

// traitTokens describe how a working provider answers rather than a fault, so a schedule
// that has ended keeps them: everything else is a fault the schedule switches off.
var traitTokens = map[string]bool{
	"tool-call":       true,
	"account-headers": true,
	"no-subops":       true,
	"no-subops-405":   true,
	"comments":        true,
	"tail-at-once":    true,
	"no-terminator":   true,
	"no-done":         true,
	"no-usage":        true,
}

// scheduleKey names one schedule: a full model name, or the path prefix a request came on.
// It holds a digest of the name, so a remembered name costs the same however long it is.
type scheduleKey struct {
	fromPath bool
	digest   [sha256.Size]byte
}

func modelKey(name string) scheduleKey { return scheduleKey{digest: sha256.Sum256([]byte(name))} }
func pathKey(prefix string) scheduleKey {
	return scheduleKey{fromPath: true, digest: sha256.Sum256([]byte(prefix))}
}

// scheduleState is what a schedule remembers of its name.
type scheduleState struct {
	seen    int       // requests so far, this one included
	firstAt time.Time // when the first one arrived
}

// schedules keeps the state of the first-<K> and for-<dur> schedules of one simulator.
type schedules struct {
	mu     sync.Mutex
	now    func() time.Time
	states map[scheduleKey]*scheduleState
	order  []scheduleKey // insertion order, for forgetting the oldest
}

func newSchedules() *schedules {
	return &schedules{now: time.Now, states: make(map[scheduleKey]*scheduleState)}
}

// schedule is what first-<K> and for-<dur> ask for; a zero field is absent.
type schedule struct {
	first    int // faults for requests 1..first; -1: no first-<K>
	duration time.Duration
}

func parseSchedule(parts []string) (schedule, bool) {
	sch := schedule{first: -1}
	found := false
	for _, part := range parts {
		if k, ok := strings.CutPrefix(part, "first-"); ok {
			if n, err := strconv.Atoi(k); err == nil && n >= 0 && k == strconv.Itoa(n) {
				sch.first, found = n, true
			}
		} else if d, ok := durationAfter(part, "for-"); ok {
			sch.duration, found = d, true
		}
	}
	return sch, found
}

// active applies the schedule in parts, counting this request against key: while the
// schedule lasts (or when parts have none) it returns parts as they are, afterwards only
// the trait tokens among them.
func (s *schedules) active(key scheduleKey, parts []string) []string {
	sch, ok := parseSchedule(parts)
	if !ok {
		return parts
	}
	st := s.record(key)
	faulty := (sch.first < 0 || st.seen <= sch.first) &&
		(sch.duration == 0 || s.now().Sub(st.firstAt) < sch.duration)
	if faulty {
		return parts
	}
	var kept []string
	for _, part := range parts {
		if traitTokens[part] {
			kept = append(kept, part)
		}
	}
	return kept
}

// record counts one request against key and returns a copy of its state.
func (s *schedules) record(key scheduleKey) scheduleState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.states[key]
	if !ok {
		if len(s.order) >= maxScheduled {
			delete(s.states, s.order[0])
			s.order = s.order[1:]
		}
		st = &scheduleState{firstAt: s.now()}
		s.states[key] = st
		s.order = append(s.order, key)
	}
	st.seen++
	return *st
}

// pathParts splits the path prefix before a route into tokens: on "/" and on "+".
func pathParts(prefix string) []string {
	return strings.FieldsFunc(prefix, func(r rune) bool { return r == '/' || r == '+' })
}

// setRetryAfter sets both retry headers for d, rounded up to whole seconds and milliseconds.
func (c *call) setRetryAfter(d time.Duration) {
	h := c.w.Header()
	h.Set("retry-after", strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10))
	h.Set("retry-after-ms", strconv.FormatInt(int64((d+time.Millisecond-1)/time.Millisecond), 10))
}

// defaultRetryAfter is what rate-limit asks for without retry-after-<dur>.
const defaultRetryAfter = 2 * time.Second

// Context windows the context-length error names.
const (
	openAIContextWindow    = 128000
	anthropicContextWindow = 200000
)

// contextLengthError is the 400 a provider answers when the prompt does not fit, worded as
// the vendors word it; the prompt is said to be as many tokens too long as the simulator
// counts for the request.
func (c *call) contextLengthError(ep endpoint) apiError {
	if c.fam != familyOpenAI { // Bedrock passes Anthropic's wording through
		return apiError{status: http.StatusBadRequest, message: fmt.Sprintf("prompt is too long: %d tokens > %d maximum",
			anthropicContextWindow+c.inputTokens(), anthropicContextWindow)}
	}
	param := "input"
	if ep == epChat {
		param = "messages"
	}
	return apiError{status: http.StatusBadRequest, code: "context_length_exceeded", param: param, message: fmt.Sprintf(
		"This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. "+
			"Please reduce the length of the messages.", openAIContextWindow, openAIContextWindow+c.inputTokens())}
}

// contentPolicyError is the 400 of a request the provider refuses on policy grounds.
func (c *call) contentPolicyError() apiError {
	if c.fam != familyOpenAI { // Bedrock passes Anthropic's wording through
		return apiError{status: http.StatusBadRequest, message: "Your request was flagged as potentially " +
			"violating our Usage Policy (https://www.anthropic.com/legal/aup) and was not processed (simulated)."}
	}
	return apiError{status: http.StatusBadRequest, code: "content_policy_violation", message: "Your request was " +
		"rejected as a result of our safety system. Your prompt may contain text that is not allowed by our " +
		"safety system (simulated)."}
}

// malformedEvent is the broken event malformed-event inserts: its data is not JSON and names
// the upstream model. It carries the name of the event it precedes.
func (c *call) malformedEvent(name string) event {
	data := `{"id":"` + newID("x") + `",,"model":` + string(mustJSON(c.model)) + `}`
	return event{name: name, data: []byte(data)}
}

// listedModels are the models GET /v1/models lists.
var listedModels = []struct{ id, displayName string }{
	{"sim-basic", "Simulator Basic"},
	{"sim-large", "Simulator Large"},
}

// listedCreated is the fixed creation time of every listed model.
var listedCreated = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// models answers GET /v1/models in the shape of the request's family.
func (c *call) models() {
	var data list
	for _, m := range listedModels {
		if c.fam == familyAnthropic {
			data = append(data, obj{{"type", "model"}, {"id", m.id}, {"display_name", m.displayName},
				{"created_at", listedCreated.Format(time.RFC3339)}})
		} else {
			data = append(data, obj{{"id", m.id}, {"object", "model"}, {"created", listedCreated.Unix()},
				{"owned_by", "switchyard-simulator"}})
		}
	}
	if c.fam != familyOpenAI { // Bedrock passes Anthropic's wording through
		c.writeJSON(obj{{"data", data}, {"has_more", false},
			{"first_id", listedModels[0].id}, {"last_id", listedModels[len(listedModels)-1].id}})
		return
	}
	c.writeJSON(obj{{"object", "list"}, {"data", data}})
}
