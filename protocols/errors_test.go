package protocols_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-gw/switchyard/protocols"
)

func TestAPIErrorBodyExact(t *testing.T) {
	cases := []struct {
		name      string
		err       *protocols.APIError
		requestID string
		want      string
	}{
		{
			name: "family A 400 names the param, code null",
			err:  protocols.InvalidParam(protocols.FamilyA, "background", "'background' responses are not supported"),
			want: `{"error":{"message":"'background' responses are not supported","type":"invalid_request_error","param":"background","code":null}}`,
		},
		{
			name: "family A 401 with code, param null",
			err:  &protocols.APIError{Family: protocols.FamilyA, Status: 401, Code: "invalid_api_key", Message: "Incorrect API key provided."},
			want: `{"error":{"message":"Incorrect API key provided.","type":"authentication_error","param":null,"code":"invalid_api_key"}}`,
		},
		{
			name:      "family A has no place for a request id",
			err:       protocols.Errorf(protocols.FamilyA, 404, "model_not_found", "The model '%s' does not exist; see GET /v1/models", "Acme-Chat"),
			requestID: "req_123",
			want:      `{"error":{"message":"The model 'Acme-Chat' does not exist; see GET /v1/models","type":"invalid_request_error","param":null,"code":"model_not_found"}}`,
		},
		{
			name: "family A 503 no channel",
			err:  protocols.Errorf(protocols.FamilyA, 503, protocols.CodeNoChannel, "no candidate"),
			want: `{"error":{"message":"no candidate","type":"service_unavailable","param":null,"code":"routing_no_available_channel"}}`,
		},
		{
			name: "family B 400 without code",
			err:  protocols.InvalidParam(protocols.FamilyB, "max_tokens", "max_tokens: field required"),
			want: `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: field required"}}`,
		},
		{
			name:      "family B with request id",
			err:       protocols.Errorf(protocols.FamilyB, 404, "model_not_found", "model: acme-sonet"),
			requestID: "req_011CSHoEeqs5C35K2UUqR7Fy",
			want:      `{"type":"error","error":{"type":"not_found_error","message":"model: acme-sonet","code":"model_not_found"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}`,
		},
		{
			name: "family B 503 carries the specification's code",
			err:  protocols.Errorf(protocols.FamilyB, 503, protocols.CodeNoChannel, "no candidate"),
			want: `{"type":"error","error":{"type":"overloaded_error","message":"no candidate","code":"routing_no_available_channel"}}`,
		},
		{
			name: "explicit type wins",
			err:  &protocols.APIError{Family: protocols.FamilyA, Status: 429, Type: "insufficient_quota", Code: "insufficient_quota", Message: "quota"},
			want: `{"error":{"message":"quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`,
		},
		{
			name: "message with quotes and newline stays valid JSON",
			err:  protocols.InvalidParam(protocols.FamilyA, "", "bad \"x\"\nnext"),
			want: `{"error":{"message":"bad \"x\"\nnext","type":"invalid_request_error","param":null,"code":null}}`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.err.Body(tc.requestID)
			assert.Equal(t, tc.want, string(got))
			assert.True(t, json.Valid(got))
		})
	}
}

func TestAPIErrorNativeTypes(t *testing.T) {
	familyA := map[int]string{
		400: "invalid_request_error",
		401: "authentication_error",
		403: "invalid_request_error",
		404: "invalid_request_error",
		405: "invalid_request_error",
		413: "invalid_request_error",
		429: "rate_limit_error",
		500: "server_error",
		501: "server_error", // DECISIONS.md: every 5xx is server_error or service_unavailable
		502: "server_error",
		503: "service_unavailable",
		504: "server_error",
	}
	familyB := map[int]string{
		400: "invalid_request_error",
		401: "authentication_error",
		403: "permission_error",
		404: "not_found_error",
		405: "invalid_request_error",
		413: "request_too_large",
		429: "rate_limit_error",
		500: "api_error",
		501: "api_error",
		502: "api_error",
		503: "overloaded_error",
		504: "timeout_error",
		529: "overloaded_error",
	}
	check := func(family protocols.Family, status int, want string) {
		e := protocols.Errorf(family, status, "", "m")
		var got struct {
			Type  string `json:"type"`
			Error struct {
				Type string `json:"type"`
			} `json:"error"`
		}
		require.NoError(t, json.Unmarshal(e.Body(""), &got))
		assert.Equal(t, want, got.Error.Type, "%s %d", family, status)
		if family == protocols.FamilyB {
			assert.Equal(t, "error", got.Type)
		}
		assert.Contains(t, e.Error(), strconv.Itoa(status)+" "+want)
	}
	for status, want := range familyA {
		check(protocols.FamilyA, status, want)
	}
	for status, want := range familyB {
		check(protocols.FamilyB, status, want)
	}
}

func TestAPIErrorWrite(t *testing.T) {
	t.Run("503 with retry after", func(t *testing.T) {
		e := protocols.Errorf(protocols.FamilyB, 503, protocols.CodeNoChannel, "retry later")
		e.RetryAfter = 7
		rec := httptest.NewRecorder()
		e.Write(rec, "req_abc")
		res := rec.Result()
		assert.Equal(t, 503, res.StatusCode)
		assert.Equal(t, "application/json", res.Header.Get("Content-Type"))
		assert.Equal(t, "7", res.Header.Get("Retry-After"))
		assert.Empty(t, res.Header.Values("X-Should-Retry"))
		body := rec.Body.String()
		assert.Equal(t, `{"type":"error","error":{"type":"overloaded_error","message":"retry later","code":"routing_no_available_channel"},"request_id":"req_abc"}`, body)
		assert.Equal(t, strconv.Itoa(len(body)), res.Header.Get("Content-Length"))
	})
	t.Run("no retry", func(t *testing.T) {
		e := protocols.Errorf(protocols.FamilyA, 503, protocols.CodeNoChannel, "model 'x' is not supplied on this protocol")
		e.NoRetry = true
		rec := httptest.NewRecorder()
		e.Write(rec, "")
		assert.Equal(t, 503, rec.Code)
		assert.Equal(t, "false", rec.Header().Get("X-Should-Retry"))
		assert.Empty(t, rec.Header().Values("Retry-After"))
		assert.JSONEq(t, `{"error":{"message":"model 'x' is not supplied on this protocol","type":"service_unavailable","param":null,"code":"routing_no_available_channel"}}`, rec.Body.String())
	})
	t.Run("plain 400", func(t *testing.T) {
		rec := httptest.NewRecorder()
		protocols.InvalidParam(protocols.FamilyA, "messages", "'messages' is required").Write(rec, "")
		assert.Equal(t, http.StatusBadRequest, rec.Code)
		assert.Empty(t, rec.Header().Values("Retry-After"))
		assert.Empty(t, rec.Header().Values("X-Should-Retry"))
	})
}

func TestStreamErrorEvent(t *testing.T) {
	e := protocols.Errorf(protocols.FamilyA, http.StatusBadGateway, "", "the upstream stream was interrupted before it completed")
	eb := protocols.Errorf(protocols.FamilyB, http.StatusBadGateway, "", "the upstream stream was interrupted before it completed")
	cases := []struct {
		name string
		kind protocols.Kind
		err  *protocols.APIError
		seq  int64
		want string
	}{
		{
			name: "chat: a data frame with a top-level error",
			kind: protocols.KindChat, err: e,
			want: "data: {\"error\":{\"message\":\"the upstream stream was interrupted before it completed\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n",
		},
		{
			name: "responses: a named error event with the next sequence number",
			kind: protocols.KindResponses, err: e, seq: 42,
			want: "event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\",\"message\":\"the upstream stream was interrupted before it completed\",\"param\":null,\"sequence_number\":42}\n\n",
		},
		{
			name: "messages: a named error event in the family B envelope",
			kind: protocols.KindMessages, err: eb,
			want: "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"the upstream stream was interrupted before it completed\"}}\n\n",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := protocols.ShapeOf(tc.kind).ErrorEvent(tc.err, tc.seq)
			assert.Equal(t, tc.want, string(got))

			// The gateway's own stream cutter sees it as the family's in-band error.
			s := protocols.NewEventStream(tc.kind, "acme-chat", false, protocols.Scrubber{})
			s.Push(got)
			ev, ok := s.Next()
			require.True(t, ok)
			assert.True(t, s.IsError(ev))
			assert.Equal(t, got, ev.Raw)
		})
	}
}
