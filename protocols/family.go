package protocols

import "net/http"

// familyRules are what the shapes of one protocol family share: the error envelope and
// its types, and how an upstream is authenticated and versioned (family_a.go,
// family_b.go).
type familyRules interface {
	// errorType is the native error type for an HTTP status.
	errorType(status int) string
	// errorBody renders an error in the family's envelope.
	errorBody(e *APIError, requestID string) []byte
	// upstreamAuth sets the candidate's credential, and any version header, on an
	// upstream request built from the client's headers.
	upstreamAuth(out, client http.Header, credential string)
}

func rulesOf(f Family) familyRules {
	if f == FamilyB {
		return familyB{}
	}
	return familyA{}
}
